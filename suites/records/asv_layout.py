"""How parbench's asv benchmarks are laid out: class names and the named parameter axes.

Shared by the writer (`asv_support`, which asv imports) and the reader (`suites.report.from_asv`),
so it imports neither asv nor a framework.

A benchmark class holds the cases of one workload; its asv parameters are the other fields of a
case id, one named axis each, so asv's web view can select and plot by them: `framework`
(``torch``), `device` with its count (``cpu:1``), `strategy` (``single``), `precision` (``fp32``;
a compiled case's carries its compiler, ``fp32+xla``, as its id does) and `params`, the
workload-parameter string (``k=512,m=512,n=512``).
"""
from __future__ import annotations

from typing import Sequence

from suites.cases.case import Case
from suites.workloads import WORKLOADS, Workload

#: asv's `param_names` of every generated benchmark, in case-id order after the workload.
AXES = ("framework", "device", "strategy", "precision", "params")
#: Suffix of the classes that hold a workload's multi-process (launched) cases.
LAUNCHED_SUFFIX = "Launched"


def axis_values(case: Case) -> tuple[str, ...]:
    """The case's value on each axis: the fields of its id after the workload."""
    return tuple(case.id.split("/", len(AXES))[1:])


def case_id_from_axes(workload: str, values: Sequence[str]) -> str:
    return "/".join((workload, *values))


def class_name(workload: type[Workload], launched: bool) -> str:
    return workload.__name__ + (LAUNCHED_SUFFIX if launched else "")


def workload_of_class(name: str) -> str | None:
    """The registered workload whose cases the benchmark class `name` holds, if any."""
    base = name.removesuffix(LAUNCHED_SUFFIX)
    return next((workload.name for workload in WORKLOADS.values() if workload.__name__ == base), None)
