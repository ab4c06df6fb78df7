"""Every `PARBENCH_*` environment variable parbench reads: its parser, with its type and range
(numbers through `suites.ranges`), what it accepts, its meaning and default.

This is the one place they are read. The CLI checks the ones a command uses before the command
starts (`check`), so a bad value stops it with one line naming the variable, the value and what
is accepted, instead of failing every case later (a rank process reading the same knob then
finds it valid). The docs' table of them (docs/extending.md) is `table()`'s, which
`REGENERATE` prints.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from suites.errors import UserError
from suites.ranges import Range, Refused

#: Longest machine label: it becomes part of a file name (most file systems allow 255 bytes).
MAX_LABEL_CHARS = 100


def machine_label(value: str) -> str:
    """A machine label (`--label`, $PARBENCH_MACHINE): printable, no path separator, short."""
    if not value or len(value) > MAX_LABEL_CHARS:
        raise ValueError(f"a label of 1 to {MAX_LABEL_CHARS} characters")
    if not value.strip():  # blanks alone name no machine: its records would be told from no other's
        raise ValueError("a label with a character other than blanks")
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


#: Ranges of the numeric knobs (`suites.ranges`): what they parse, and what `accepted` says.
WHOLE_AT_LEAST_ONE = Range(int, low=1)
SECONDS = Range(float, low=0, low_excluded=True, unit="seconds")
FLOP = Range(float, low=0, low_excluded=True, unit="FLOP")
PORT = Range(int, low=1, high=65535)
PROCESS_ID = Range(int, low=1, unit="process id")


def machine_memory_bytes() -> int:
    """This machine's physical memory (os.sysconf), or 1 TiB where it cannot say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**40


#: Input copies spanning more than the machine's memory end in the OOM killer, not in a record.
ROTATION = Range(int, low=0, high=machine_memory_bytes(), unit="bytes",
                 high_reason=f"this machine's memory, {machine_memory_bytes() / 2**30:.1f} GiB")


def fraction(value: str) -> float:
    number = float(value)
    if not 0 < number < 10:
        raise ValueError("a fraction such as 0.2 (20%)")
    return number


#: The faults `suites.measure.faults.Fault` injects (a test keeps the two the same: this layer
#: may not import that one).
FAULTS = ("not_all_reduced", "scaled_twice", "wrong_shard", "dropped_microbatch", "stale_update",
          "flipped_batchnorm")


def fault_name(value: str) -> str:
    if value not in FAULTS:
        raise Refused(f"one of {', '.join(FAULTS)}")
    return value


def case_root(value: str) -> int:
    """A case's root process: this process or one of its ancestors, and not init (process 1), whose
    tree is every process's, unless process 1 is parbench itself (the first process of a container)."""
    pid = int(PROCESS_ID.parse(value))
    if pid == 1 and not _same_program(1):
        raise Refused("a process id other than 1: process 1 (init) is every process's ancestor, so the case's "
                      "own CPU time would be the whole machine's and contention could never show")
    lineage = _lineage(os.getpid())
    if lineage and pid not in lineage:
        raise Refused(f"this process ({os.getpid()}) or one of its ancestors ({', '.join(map(str, lineage[1:]))}); "
                      f"process {pid} is neither")
    return pid


def _lineage(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """`pid`, its parent, its parent's parent ... up to process 1; [] where /proc cannot say."""
    chain = []
    while pid > 0 and pid not in chain:
        chain.append(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat[stat.rindex(")") + 2:].split()[1])  # the field after the state: ppid
        except (OSError, ValueError, IndexError):
            return [] if len(chain) == 1 else chain
    return chain


def _same_program(pid: int) -> bool:
    """Whether process `pid` runs the executable this one runs (a parbench launcher does)."""
    try:
        return os.readlink(f"/proc/{pid}/exe") == os.readlink("/proc/self/exe")
    except OSError:  # another user's process (init, on a host): not parbench's
        return False


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
    #: Text -> value; ValueError if invalid (a `Refused` says why, in place of `accepted`).
    parse: Callable[[str], Any]
    #: What a valid value is, said in the error line and in the docs' table.
    accepted: str
    #: What it does, and its default where it has one (the reader supplies it).
    meaning: str
    #: Where the docs say more (a docs/ page and anchor), linked from the docs' table.
    see: str = ""

    def read(self) -> Any:
        """The parsed value, or None when unset or empty; UserError when set to something invalid."""
        raw = os.environ.get(self.name)
        if not raw:
            return None
        try:
            return self.parse(raw)
        except ValueError as error:
            expected = str(error) if isinstance(error, Refused) else self.accepted
            raise UserError(f"${self.name}={raw!r} is not valid: expected {expected} ({self.meaning}); "
                            f"fix it or unset it") from None


KNOBS: dict[str, Knob] = {knob.name: knob for knob in (
    Knob("PARBENCH_MACHINE", machine_label, f"1 to {MAX_LABEL_CHARS} printable characters without '/'",
         "machine label stored with every record; default the hostname"),
    Knob("PARBENCH_PLUGINS", path_list, "':'-separated .py files or importable module names, each registering "
         "a model or a workload", "files or modules that register user models (`suites.user_model`) or workloads"),
    Knob("PARBENCH_ROTATION_BYTES", ROTATION.parse, "a whole number of bytes from 0 to this machine's memory",
         "span of a kernel's rotated input copies; 0 turns rotation off", see="method.md#inputs"),
    Knob("PARBENCH_THREADS", WHOLE_AT_LEAST_ONE.parse, WHOLE_AT_LEAST_ONE.accepted,
         "threads per rank process; set by the launcher where ranks share a CPU"),
    Knob("PARBENCH_CPUS", cpu_list, "comma-separated numbers of CPUs this process may use, such as 0,1",
         "cores a rank process is pinned to; set by the launcher"),
    Knob("PARBENCH_CASE_ROOT", case_root, "the id of this process or of one of its ancestors, other than init's (1)",
         "the process that launched a case, whose process tree is the case's own CPU time; set by the launcher",
         see="method.md#noise-and-contention"),
    Knob("PARBENCH_RENDEZVOUS_TIMEOUT_S", SECONDS.parse, SECONDS.accepted,
         "how long the tasks of a TF cluster wait for each other; default 120 s"),
    Knob("PARBENCH_CASE_TIMEOUT_S", SECONDS.parse, SECONDS.accepted,
         "a case's deadline, which bounds how long a multiworker worker waits for its peers in a "
         "collective; set by the worker from its --timing"),
    Knob("PARBENCH_REFERENCE_FLOP_BUDGET", FLOP.parse, f"{FLOP.accepted}, such as 2e12",
         "the most a training check's reference may cost before the check is left undone; default "
         "5e11 (suites.measure.reference_budget)", see="method.md#checks"),
    Knob("PARBENCH_GATE_THRESHOLD", fraction, "a fraction such as 0.2 (20%)",
         "pytest-benchmark gate threshold; default 0.2",
         see="asv-and-ci.md#a-regression-gate-that-does-not-flap-on-shared-runners"),
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
    Knob("PARBENCH_INJECT_FAULT", fault_name, f"one of {', '.join(FAULTS)}",
         "testing hook: breaks a training case as a strategy bug would, so its check must fail"),
    Knob("PARBENCH_TF_SLURM_PORT", PORT.parse, PORT.accepted,
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
              "PARBENCH_PEAKS", "PARBENCH_REFERENCE_FLOP_BUDGET", "PARBENCH_NODE", "PARBENCH_TF_SLURM_PORT",
              "PARBENCH_REHEARSAL", "PARBENCH_INJECT_FAULT")


def read(name: str) -> Any:
    return KNOBS[name].read()


def check(names: Iterable[str]) -> None:
    """Parse each named knob that is set; the first invalid one raises UserError."""
    for name in names:
        KNOBS[name].read()


#: The docs' table of knobs (`DOCUMENT`) lies between these lines.
TABLE_START = "<!-- knob-table:start (generated from suites/knobs.py; do not edit) -->"
TABLE_END = "<!-- knob-table:end -->"
DOCUMENT = "docs/extending.md"
REGENERATE = "python -c 'from suites.knobs import table; print(table(), end=\"\")'"


def table() -> str:
    """Every knob as a row of a Markdown table: its name, what it accepts and what it does."""
    rows = ["| variable | accepts | what it sets |", "| --- | --- | --- |"]
    rows += [f"| `{knob.name}` | {_cell(knob.accepted)} | {_cell(knob.meaning)}"
             + (f" ([{knob.see.partition('#')[0]}]({knob.see}))" if knob.see else "") + " |" for knob in KNOBS.values()]
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")

