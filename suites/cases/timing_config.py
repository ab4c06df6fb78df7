"""How hard the timer tries: a suite's `[timing]` table, part of what a suite declares."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TimingConfig:
    """How hard to try. Suites may override any field in their `[timing]` table."""

    warmup_s: float = 0.25
    min_warmup_steps: int = 3
    #: A sample spans at least this long, so clock resolution and per-call jitter don't matter.
    block_min_s: float = 0.02
    min_samples: int = 7
    min_time_s: float = 0.3
    #: Stop once IQR / median is at or below this...
    target_rel_iqr: float = 0.02
    #: ... or once this much time has been spent timing this case.
    budget_s: float = 4.0
    max_samples: int = 2000
    #: Hard limit on one out-of-process case, start-up and rendezvous included, after which its
    #: processes are killed; None derives it from the budget (`suites.runner.deadline.case_timeout`).
    case_timeout_s: float | None = None
    #: A case measured while other processes took its cores (`contended`,
    #: `suites.records.contention`) is measured again, at most this many more times; the record
    #: keeps the first uncontended measurement, else the least contended, flagged as it was.
    contention_retries: int = 2

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> "TimingConfig":
        return cls(**values)
