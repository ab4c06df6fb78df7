"""The workload registry: every workload any front end can run, defined once."""
from __future__ import annotations

from suites.cases.case import Case
from suites.workloads.base import Param, Workload
from suites.workloads.collectives import Allreduce
from suites.workloads.kernels import Conv2d, Matmul
from suites.workloads.training import TrainStep

WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (Matmul, Conv2d, TrainStep, Allreduce)}


class UnknownWorkload(KeyError):
    """A name (a case's, a grid's) that is no registered workload. A KeyError, as the
    registry lookup it replaces raised, with a message that names the registered ones."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name
        self.message = f"unknown workload {name!r}; registered: {', '.join(sorted(WORKLOADS))}"

    def __str__(self) -> str:  # KeyError's would print the repr of the name alone
        return self.message


def workload_class(name: str) -> type[Workload]:
    """The registered workload called `name`; raises UnknownWorkload."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(name) from None


def workload_of(case: Case) -> Workload:
    """The workload of `case`, with its parameters; raises UnknownWorkload."""
    return workload_class(case.workload)(case)


def register(workload: type[Workload]) -> type[Workload]:
    """Add a workload (a class decorator for user code); its name must be new."""
    if workload.name in WORKLOADS and WORKLOADS[workload.name] is not workload:
        raise ValueError(f"a workload named {workload.name!r} is already registered")
    WORKLOADS[workload.name] = workload
    return workload


__all__ = ["Param", "UnknownWorkload", "Workload", "WORKLOADS", "register", "workload_class", "workload_of"]
