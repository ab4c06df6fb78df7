"""`parbench run --max-minutes`: start a case only while the run's elapsed time plus the case's
estimate fits the cap. Cases that would not fit are left out: not measured, not recorded as
failed, and listed at the end of the run and in its stored summary."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from suites.cases.case import Case
from suites.errors import UserError

def cap_seconds(max_minutes: float | None) -> float | None:
    """Seconds of `--max-minutes` (None: no cap); a cap that is no positive finite number of
    minutes is the user's error."""
    if max_minutes is None:
        return None
    if not math.isfinite(max_minutes) or max_minutes <= 0:
        raise UserError(f"--max-minutes must be a positive number of minutes, got {max_minutes}; "
                        f"e.g. --max-minutes 10, or leave it out to run every case")
    return max_minutes * 60.0


@dataclass
class RunCap:
    """The cap of one run. `clock` is monotonic seconds (tests pass a controlled one)."""

    limit_s: float
    clock: Callable[[], float] = time.monotonic
    left_out: list[Case] = field(default_factory=list)
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def admits(self, case: Case, estimate_s: float) -> bool:
        """Whether `case`, expected to take `estimate_s`, still fits; if not, it is left out."""
        if self.clock() - self.started + estimate_s <= self.limit_s:
            return True
        self.left_out.append(case)
        return False

    def left_out_text(self) -> str:
        """'left out by --max-minutes: N cases: id, id, ...' ('' when none was)."""
        if not self.left_out:
            return ""
        ids = [case.id for case in self.left_out]
        return f"left out by --max-minutes: {len(ids)} cases: {', '.join(ids)}"
