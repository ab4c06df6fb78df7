"""A GPU rank's CPUs: the cores of its GPU's NUMA node (issue 48, 9d).

NVML's `nvmlDeviceGetCpuAffinity` names the CPUs nearest a GPU (its NUMA node's). A rank left on
every core of a two-socket node runs its host work (data loading, kernel launches, NCCL's proxy
thread) half the time across the socket link. So a GPU rank narrows its affinity to those CPUs
among the ones it may use, unless someone already chose: `PARBENCH_CPUS`, a Slurm `--cpu-bind`,
or an affinity narrower than the node (taskset, numactl). What was done and why is kept for the
rank's record (`decision`); without pynvml (`nvidia-ml-py`, extra `energy`) nothing is pinned and
the record says so.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal

from suites.measure.process_env import CPUS_ENV

Action = Literal["pinned", "kept", "skipped"]
#: Bits per word of NVML's CPU set (an array of C unsigned longs).
_WORD_BITS = 64


@dataclass(frozen=True)
class CpuPinning:
    """What a GPU rank did with its CPU affinity, and why; the counts are of logical CPUs."""

    action: Action
    reason: str
    cpus_before: int
    cpus_after: int
    #: The CPUs NVML names nearest the rank's GPU; None where it was not asked.
    gpu_numa_cpus: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: This process's decision, once made: `pin_near_gpu` decides once per process (a second call would
#: find the affinity it set narrower than the node and call it the user's).
_decided: CpuPinning | None = None


def decision() -> dict[str, Any] | None:
    """This process's pinning decision for its record, None where it has made none (no GPU rank)."""
    return None if _decided is None else _decided.to_dict()


def cpus_from_mask(words: Any) -> set[int]:
    """The CPUs of NVML's CPU set: bit i of word j is CPU 64 j + i."""
    return {index * _WORD_BITS + bit for index, word in enumerate(words) for bit in range(_WORD_BITS)
            if int(word) >> bit & 1}


def user_binding(current: set[int], node_cpus: int, environ: dict[str, str]) -> str | None:
    """Who already chose this rank's CPUs, None where nobody did."""
    if environ.get(CPUS_ENV):
        return f"parbench pinned it ({CPUS_ENV})"
    bind = environ.get("SLURM_CPU_BIND_TYPE", "")
    if bind and not bind.startswith("none"):
        return f"Slurm bound it (--cpu-bind, SLURM_CPU_BIND_TYPE={bind.rstrip(',')})"
    if len(current) < node_cpus:
        return f"its affinity ({len(current)} of the node's {node_cpus} CPUs) was narrowed before it started"
    return None


def choose(current: set[int], nearest: set[int], node_cpus: int, environ: dict[str, str]) -> tuple[CpuPinning,
                                                                                                    set[int] | None]:
    """The decision for a rank on `current` CPUs whose GPU is nearest `nearest`, and the CPUs to pin
    to (None: leave the affinity)."""
    before = len(current)
    bound = user_binding(current, node_cpus, environ)
    if bound:
        return CpuPinning("kept", bound, before, before, len(nearest)), None
    target = current & nearest
    if not target:
        return CpuPinning("kept", "none of the GPU's NUMA CPUs is among those this rank may use", before, before,
                          len(nearest)), None
    if target == current:
        return CpuPinning("kept", "its CPUs are all on the GPU's NUMA node already", before, before,
                          len(nearest)), None
    return CpuPinning("pinned", "to the CPUs of its GPU's NUMA node (nvmlDeviceGetCpuAffinity)", before,
                      len(target), len(nearest)), target


def nearest_cpus(nvml: Any, handle: Any, node_cpus: int) -> set[int]:
    words = nvml.nvmlDeviceGetCpuAffinity(handle, -(-node_cpus // _WORD_BITS))
    return cpus_from_mask(words)


def pin_near_gpu(ordinal: int, nvml_loader: Callable[[], Any] | None = None,
                 environ: dict[str, str] | None = None) -> CpuPinning:
    """Narrow this process's affinity to CUDA device `ordinal`'s NUMA CPUs where nobody chose them
    yet (`choose`); the decision, also kept for `decision`. NVML's errors skip the pinning, with why."""
    global _decided
    if _decided is not None:
        return _decided
    from suites.hardware.devices import cuda_device_uuids
    from suites.measure.energy_meters import import_nvml, nvml_handles

    environ = dict(os.environ) if environ is None else environ
    current = os.sched_getaffinity(0)
    node_cpus = os.cpu_count() or len(current)
    try:
        nvml = (nvml_loader or import_nvml)()
    except ImportError:
        _decided = CpuPinning("skipped", "pynvml is not installed (pip install 'parbench[energy]' for nvidia-ml-py)",
                              len(current), len(current))
        return _decided
    try:
        handles, problems = nvml_handles(nvml, [ordinal], environ.get("CUDA_VISIBLE_DEVICES"), cuda_device_uuids())
        if not handles:
            raise LookupError("; ".join(problems) or f"no NVML device for GPU {ordinal}")
        nearest = nearest_cpus(nvml, handles[0][1], node_cpus)
    except Exception as error:  # pynvml's NVMLError subclasses, or no handle
        _decided = CpuPinning("skipped", f"NVML could not say ({type(error).__name__}: {error})",
                              len(current), len(current))
        return _decided
    finally:
        with contextlib.suppress(Exception):  # NVML counts its initialisations; not initialised: nothing to end
            nvml.nvmlShutdown()
    _decided, target = choose(current, nearest, node_cpus, environ)
    if target is not None:
        os.sched_setaffinity(0, target)
    return _decided
