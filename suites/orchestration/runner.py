"""Run cases end to end: availability, launch, record. Every finished case is stored at once.
Each case is resolved into its job once (`job_for`, cached) by the entry points it calls."""
from __future__ import annotations

import os
from typing import Callable, Iterable, Iterator

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.records.contention import judge, read_cpu
from suites.records.record import Record
from suites.orchestration.cases import launch_case, store_outcome, unavailable_reason
from suites.run.execute import Outcome
from suites.run.recording import RunContext

__all__ = ["RunContext", "run_case", "run_cases", "store_outcome"]


def run_case(case: Case, context: RunContext,
             execute: Callable[[Case, TimingConfig], Outcome] = launch_case) -> Record:
    """Run `case` if it is available here (else keep the reason), then store its record with
    what competed for the CPU while it ran."""
    reason = unavailable_reason(case)
    if reason:
        return store_outcome(case, Outcome(Status.UNAVAILABLE, reason), context)
    before = read_cpu()
    outcome = execute(case, context.timing)
    return store_outcome(case, outcome, context, judge(before, read_cpu(), os.cpu_count() or 1))


def run_cases(cases: Iterable[Case], context: RunContext) -> Iterator[Record]:
    """Yield each record as soon as it is stored, so a display can follow progress."""
    context.store.ensure_writable(context.environment["machine"])
    for case in cases:
        yield run_case(case, context)
