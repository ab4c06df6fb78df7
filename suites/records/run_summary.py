"""A run's summary, stored beside its records: what was asked, what ran, what was left out.

One JSON file per run, `<results>/parbench/runs/<run_id>.json` (the records stay the data; this
says what a run did not measure, which no record can):
  run_id, suite, machine, started, finished (ISO 8601 UTC)
  cases            how many cases the suite (after --filter) had
  counts           {ok, unavailable, failed}: the records this run stored
  estimate_s       the run's estimate before it started
  elapsed_s        its wall time
  max_minutes      the cap (`--max-minutes`), or null
  left_out         ids of the cases the cap left out: not measured, no record
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    suite: str
    machine: str
    started: str
    finished: str
    cases: int
    counts: dict[str, int]
    estimate_s: float
    elapsed_s: float
    max_minutes: float | None = None
    left_out: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
