"""The workload registry: every workload any front end can run, defined once."""
from __future__ import annotations

from .base import Param, Workload
from .collectives import Allreduce
from .kernels import Conv2d, Matmul
from .training import TrainStep

WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (Matmul, Conv2d, TrainStep, Allreduce)}


def register(workload: type[Workload]) -> type[Workload]:
    """Add a workload (a class decorator for user code); its name must be new."""
    if workload.name in WORKLOADS and WORKLOADS[workload.name] is not workload:
        raise ValueError(f"a workload named {workload.name!r} is already registered")
    WORKLOADS[workload.name] = workload
    return workload


__all__ = ["Param", "Workload", "WORKLOADS", "register"]
