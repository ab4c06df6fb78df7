"""A strategy's availability rules as data: named requirements, checked in order.

A plugin lists its `requirements` (`suites.strategies.base.StrategyPlugin.requirements`); each
has a short name, a one-line summary and a check that returns why a case cannot run on a
device, or None. The first reason found is the case's (`first_reason`), word for word as the
check wrote it. Because the rules are data, they are validated where they are declared (a
malformed name or summary here, a name twice in one plugin in `StrategyPlugin`) and tabled in
docs/strategy-hooks.md from the plugins themselves (`suites.strategies.requirement_table`),
without reading their source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from suites.hardware.devices import DeviceInfo
    from suites.strategies.jobs import Job

#: Why a case cannot run on a device, or None where it can.
Check = Callable[["Job", "DeviceInfo"], "str | None"]

#: A requirement's name: lower-case words joined by "-" or "_" ("nccl-one-gpu-per-rank").
NAME = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")


@dataclass(frozen=True)
class Requirement:
    """One rule a case must meet to run under a strategy on a device."""

    #: Short, and unique among one plugin's requirements.
    name: str
    #: What it requires, on one line: the docs' table shows it beside the name.
    summary: str
    #: Why the case cannot run on the device, or None where it meets the requirement.
    check: Check

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ValueError(f"requirement name {self.name!r} is not lower-case words joined by '-' or '_'")
        if not self.summary.strip() or "\n" in self.summary:
            raise ValueError(f"requirement {self.name!r} needs a summary of one non-empty line")


def requirement(summary: str, name: str | None = None) -> Callable[[Check], Requirement]:
    """Decorate a check to make it a `Requirement`, named after the function ("equal_shards" is
    "equal-shards") unless `name` is given."""
    def make(check: Check) -> Requirement:
        return Requirement(name or check.__name__.replace("_", "-"), summary, check)
    return make


def first_reason(requirements: Iterable[Requirement], job: "Job", device: "DeviceInfo") -> str | None:
    """The reason of the first requirement the case does not meet, in order, or None: checks
    after it are not run (a later one may assume what an earlier one established)."""
    for each in requirements:
        reason = each.check(job, device)
        if reason:
            return reason
    return None


def repeated_names(requirements: Iterable[Requirement]) -> list[str]:
    """The names that occur more than once among `requirements`, in order."""
    seen: set[str] = set()
    repeated: list[str] = []
    for each in requirements:
        if each.name in seen and each.name not in repeated:
            repeated.append(each.name)
        seen.add(each.name)
    return repeated
