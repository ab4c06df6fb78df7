"""How long a case's processes may run before the launcher stops them: what a launcher waits for,
what a worker process tells its collectives, and what an estimate is capped at."""
from __future__ import annotations

from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile
from suites.measure.timing import STARTUP_ALLOWANCE_S, case_deadline_s
from suites.strategies.jobs import Job


def case_timeout(timing: TimingConfig, job: Job | None = None) -> float:
    """How long a launcher lets `job` (or any case, without one) run: `case_deadline_s` with its
    strategy's `Rules.startup_allowance_s` and whether it is compiled."""
    startup = job.strategy.rules.startup_allowance_s if job is not None else None
    return case_deadline_s(timing, STARTUP_ALLOWANCE_S if startup is None else startup,
                           job is not None and job.case.compile is not Compile.NONE)
