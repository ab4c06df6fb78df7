"""What the measuring layer reads of a job: the contract `suites.strategies.jobs.Job` fulfils.

A runnable is made from the job its case resolved into, and a capability's method is given it;
the job itself (its strategy plugin, typed options and compiler) belongs to the strategies layer,
above this one. Below it the job is named by this protocol, so that no import, not even one a
type checker alone reads, points up from the measuring layer (`tests/test_layers.py`)."""
from __future__ import annotations

from typing import Protocol

from suites.cases.case import Case
from suites.workloads.base import Workload


class JobContract(Protocol):
    """A case resolved: the case and its workload (a `Job` also carries its strategy, options
    and compiler, which the framework runnables and the strategies read as a `Job`)."""

    @property
    def case(self) -> Case: ...

    @property
    def workload(self) -> Workload: ...
