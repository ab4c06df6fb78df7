"""How parbench's asv benchmarks are laid out: class names and the named parameter axes.

Shared by the writer (`asv_support`, which asv imports) and the reader (`suites.report.load.asv`),
so it imports neither asv nor a framework.

A benchmark class holds the cases of one workload; its asv parameters are the other fields of a
case id, one named axis each, so asv's web view can select and plot by them: `framework`
(``torch``), `device` with its count (``cpu:1``), `strategy` (``single``), `precision` (``fp32``;
a compiled case's carries its compiler, ``fp32+xla``, as its id does) and `params`, the
workload-parameter string (``k=512,m=512,n=512``).
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

from suites.cases.case import Case

#: asv's `param_names` of every generated benchmark, in case-id order after the workload.
AXES = ("framework", "device", "strategy", "precision", "params")
#: Suffix of the classes that hold a workload's multi-process (launched) cases.
LAUNCHED_SUFFIX = "Launched"


def axis_values(case: Case) -> tuple[str, ...]:
    """The case's value on each axis: the fields of its id after the workload."""
    return tuple(case.id.split("/", len(AXES))[1:])


def case_id_from_axes(workload: str, values: Sequence[str]) -> str:
    return "/".join((workload, *values))


def class_name(workload: type, launched: bool) -> str:
    """The benchmark class of a workload class's cases: the workload class's own name."""
    return workload.__name__ + (LAUNCHED_SUFFIX if launched else "")


def workload_of_class(name: str, case_ids: Iterable[str] = ()) -> str | None:
    """The workload whose cases the benchmark class `name` holds: that of the case ids the
    class lists (benchmarks.json's `case_ids`: one workload a class); without a list, the
    workload whose name the class name spells in CamelCase, as every built-in workload's
    class does (`train_step` -> `TrainStep`, `conv2d` -> `Conv2d`). Read from the results
    alone: the report needs no workload registry. None where neither says."""
    base = name.removesuffix(LAUNCHED_SUFFIX)
    listed = {case_id.split("/", 1)[0] for case_id in case_ids}
    if len(listed) == 1:
        return listed.pop()
    if listed or not CAMEL_CASE.fullmatch(base):
        return None
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


#: A class name in CamelCase: words, each an upper-case letter then lower-case letters or digits.
CAMEL_CASE = re.compile(r"(?:[A-Z][a-z0-9]+)+")
