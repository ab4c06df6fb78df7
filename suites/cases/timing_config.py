"""How hard the timer tries: a suite's `[timing]` table, part of what a suite declares."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suites.ranges import Range, Refused


class TimingFieldError(ValueError):
    """A `[timing]` value that is not accepted; `key` names its field."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key


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

    @classmethod
    def checked(cls, values: dict[str, Any]) -> "TimingConfig":
        """The config a suite's `[timing]` table sets, each value checked against `RANGES`: a
        TimingFieldError naming the first field that is unknown, of the wrong kind or out of range."""
        for key, value in values.items():
            if key not in RANGES:
                raise TimingFieldError(key, f"unknown key; allowed: {', '.join(sorted(RANGES))}")
            try:
                RANGES[key].check(value)
            except Refused as error:
                raise TimingFieldError(key, f"{value!r} is not valid: expected {error}") from None
        config = cls.from_mapping(values)
        if config.max_samples < config.min_samples:
            raise TimingFieldError("max_samples", f"{config.max_samples} is below min_samples, "
                                                  f"{config.min_samples}: give max_samples >= min_samples")
        return config


#: What each field accepts where a suite's `[timing]` table sets it. The highest values keep every
#: case, in process or not, within hours (an in-process step cannot be interrupted, so its bound is
#: the timer's own); the counts are whole numbers.
RANGES: dict[str, Range] = {
    "warmup_s": Range(float, 0, True, 600.0, "seconds"),
    "min_warmup_steps": Range(int, 1, high=100_000, unit="steps"),
    "block_min_s": Range(float, 0, True, 60.0, "seconds"),
    "min_samples": Range(int, 1, high=100_000, unit="samples"),
    "min_time_s": Range(float, 0, True, 3600.0, "seconds"),
    "target_rel_iqr": Range(float, 0, True, 1.0),
    "budget_s": Range(float, 0, True, 3600.0, "seconds"),
    "max_samples": Range(int, 1, high=1_000_000, unit="samples"),
    "case_timeout_s": Range(float, 0, True, 86_400.0, "seconds"),
    "contention_retries": Range(int, 0, high=10, unit="retries"),
}
