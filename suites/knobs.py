"""Every `PARBENCH_*` environment variable parbench reads: its parser, meaning and default.

This is the one place they are read. The CLI checks the ones a command uses before the command
starts (`check`), so a bad value stops it with one line naming the variable, the value and what
is accepted, instead of failing every case later (a rank process reading the same knob then
finds it valid).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from suites.errors import UserError

#: Longest machine label: it becomes part of a file name (most file systems allow 255 bytes).
MAX_LABEL_CHARS = 100


def machine_label(value: str) -> str:
    """A machine label (`--label`, $PARBENCH_MACHINE): printable, no path separator, short."""
    if not value or len(value) > MAX_LABEL_CHARS:
        raise ValueError(f"a label of 1 to {MAX_LABEL_CHARS} characters")
    if "/" in value or "\\" in value or not value.isprintable():
        raise ValueError("a label without '/', '\\' or control characters")
    return value


def check_label(value: str | None, option: str = "--label") -> None:
    """UserError unless `value` (an option's value; None when not given) is a valid machine label."""
    if value is None:
        return
    try:
        machine_label(value)
    except ValueError as error:
        shown = repr(value if len(value) <= 40 else value[:40] + "...")
        raise UserError(f"{option} {shown} ({len(value)} characters) is not valid: expected {error}") from None


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("a whole number >= 1")
    return number


def non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("a whole number >= 0")
    return number


def positive_seconds(value: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("a finite number of seconds > 0")
    return number


def positive_number(value: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("a finite number > 0, such as 2e12")
    return number


def fraction(value: str) -> float:
    number = float(value)
    if not 0 < number < 10:
        raise ValueError("a fraction such as 0.2 (20%)")
    return number


def cpu_list(value: str) -> list[int]:
    cpus = [int(cpu) for cpu in value.split(",")]
    if any(cpu < 0 for cpu in cpus):
        raise ValueError("CPU numbers >= 0")
    if not set(cpus) <= os.sched_getaffinity(0):  # pinning to a core it may not use fails every rank
        raise ValueError(f"CPUs this process may use: {','.join(map(str, sorted(os.sched_getaffinity(0))))}")
    return cpus


def existing_file(value: str) -> Path:
    path = Path(value)
    if not path.is_file():
        raise ValueError("the path of an existing file")
    return path


def path_list(value: str) -> list[str]:
    return [entry for entry in value.split(os.pathsep) if entry]


def zero_or_one(value: str) -> bool:
    if value not in ("0", "1"):
        raise ValueError("1 or 0")
    return value == "1"


@dataclass(frozen=True)
class Knob:
    name: str
    parse: Callable[[str], Any]
    #: What a valid value is, said in the error line.
    accepted: str
    #: What it does, and its default where it has one (the reader supplies it).
    meaning: str

    def read(self) -> Any:
        """The parsed value, or None when unset or empty; UserError when set to something invalid."""
        raw = os.environ.get(self.name)
        if not raw:
            return None
        try:
            return self.parse(raw)
        except ValueError:
            raise UserError(f"${self.name}={raw!r} is not valid: expected {self.accepted} ({self.meaning}); "
                            f"fix it or unset it") from None


KNOBS: dict[str, Knob] = {knob.name: knob for knob in (
    Knob("PARBENCH_MACHINE", machine_label, f"1 to {MAX_LABEL_CHARS} printable characters without '/'",
         "machine label stored with every record; default the hostname"),
    Knob("PARBENCH_PLUGINS", path_list, "':'-separated .py files or importable module names",
         "files or modules that register user models (`suites.user_model`)"),
    Knob("PARBENCH_ROTATION_BYTES", non_negative_int, "a whole number of bytes >= 0",
         "span of a kernel's rotated input copies; 0 turns rotation off"),
    Knob("PARBENCH_THREADS", positive_int, "a whole number >= 1",
         "threads per rank process; set by the launcher where ranks share a CPU"),
    Knob("PARBENCH_CPUS", cpu_list, "comma-separated numbers of CPUs this process may use, such as 0,1",
         "cores a rank process is pinned to; set by the launcher"),
    Knob("PARBENCH_CASE_ROOT", positive_int, "a process id (a whole number >= 1)",
         "the process that launched a case, whose process tree is the case's own CPU time; set by the launcher"),
    Knob("PARBENCH_RENDEZVOUS_TIMEOUT_S", positive_seconds, "a finite number of seconds > 0",
         "how long the tasks of a TF cluster wait for each other; default 120 s"),
    Knob("PARBENCH_CASE_TIMEOUT_S", positive_seconds, "a finite number of seconds > 0",
         "a case's deadline, which bounds how long a multiworker worker waits for its peers in a "
         "collective; set by the worker from its --timing"),
    Knob("PARBENCH_REFERENCE_FLOP_BUDGET", positive_number, "a finite number of FLOP > 0, such as 2e12",
         "the most a training check's reference may cost before the check is left undone; default "
         "5e11 (suites.measure.reference_budget)"),
    Knob("PARBENCH_GATE_THRESHOLD", fraction, "a fraction such as 0.2 (20%)",
         "pytest-benchmark gate threshold; default 0.2"),
    Knob("PARBENCH_PEAKS", existing_file, "the path of an existing TOML file",
         "device peaks table read before suites/peaks.toml"),
    Knob("PARBENCH_PRICES", existing_file, "the path of an existing TOML file",
         "price table overriding suites/prices.toml"),
    Knob("PARBENCH_REFERENCES", existing_file, "the path of an existing TOML file",
         "published reference figures read before suites/references.toml"),
    Knob("PARBENCH_ASV_SUITE", str, "a built-in suite name or a .toml grid path",
         "the suite asv benchmarks; default quick"),
    Knob("PARBENCH_REHEARSAL", zero_or_one,
         "1 or 0",
         "set by `parbench run --rehearse` in its processes: GPU cases on the CPU take CUDA's optimizer kernels"),
    Knob("PARBENCH_INJECT_FAULT", str, "a fault name of suites/measure/faults.py",
         "testing hook: breaks a training case as a strategy bug would, so its check must fail"),
    Knob("PARBENCH_TF_SLURM_PORT", positive_int, "a port number (a whole number >= 1)",
         "set by parbench in a TF cluster task of a Slurm step over hosts of their own: the first port of the "
         "tasks on each node; the task takes TF_CONFIG from TF's SlurmClusterResolver"),
    Knob("PARBENCH_NODE", str, "a node's name, such as node1",
         "set by parbench in a rank process it placed on a node of several (Slurm, --nnodes): the record keeps "
         "every rank's node"),
    Knob("PARBENCH_TPU_PLUGGABLE_DEVICE_LIBRARY", str, "the path of a libtpu library or a folder holding one",
         "set by parbench in a process that keeps libtpu out: the libtpu TF_PLUGGABLE_DEVICE_LIBRARY_PATH it "
         "took out of its environment, which the TPU processes it starts get back"),
)}


#: The knobs a process running cases reads (`parbench run`, `calibrate`, a worker under torchrun).
CASE_KNOBS = ("PARBENCH_MACHINE", "PARBENCH_PLUGINS", "PARBENCH_ROTATION_BYTES", "PARBENCH_THREADS",
              "PARBENCH_CPUS", "PARBENCH_CASE_ROOT", "PARBENCH_RENDEZVOUS_TIMEOUT_S", "PARBENCH_CASE_TIMEOUT_S",
              "PARBENCH_PEAKS", "PARBENCH_REFERENCE_FLOP_BUDGET", "PARBENCH_NODE", "PARBENCH_TF_SLURM_PORT")


def read(name: str) -> Any:
    return KNOBS[name].read()


def check(names: Iterable[str]) -> None:
    """Parse each named knob that is set; the first invalid one raises UserError."""
    for name in names:
        KNOBS[name].read()
