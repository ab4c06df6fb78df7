"""Run cases end to end: availability, launch, record. Every finished case is stored at once.
Each case is resolved into its job once (`job_for`, cached) by the entry points it calls."""
from __future__ import annotations

import os
from typing import Callable, Iterable, Iterator

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.records.contention import Contention, judge, read_cpu, with_attempts
from suites.records.record import Record
from suites.orchestration.cases import launch_case, store_outcome, unavailable_reason
from suites.run.execute import Outcome
from suites.run.recording import RunContext, keeps_cores_busy
from suites.strategies.jobs import job_for

__all__ = ["RunContext", "run_case", "run_cases", "store_outcome"]


def _measured(outcome: Outcome) -> bool:
    return outcome.status is Status.OK and outcome.measurement is not None and outcome.measurement.cpu is not None


def run_case(case: Case, context: RunContext,
             execute: Callable[[Case, TimingConfig], Outcome] = launch_case) -> Record:
    """Run `case` if it is available here (else keep the reason), then store its record with
    what competed for its cores while it was timed (`suites.records.contention`).

    A case measured `contended` (other processes took its cores over its timed blocks) is run
    again, at most `timing.contention_retries` more times, until a measurement is not
    contended. The record keeps that one, else the least contended, with its own verdict:
    still `contended` where every try was; its `contention.attempts` and `attempt_shares` say
    how many measurements were taken and what others took in each. Only a verdict measured over
    timed blocks is retried: the load-average fallback lags a minute behind and would say the
    same again.
    """
    reason = unavailable_reason(case)
    if reason:
        return store_outcome(case, Outcome(Status.UNAVAILABLE, reason), context)
    busy = keeps_cores_busy(job_for(case))
    tries: list[tuple[Outcome, Contention]] = []
    for _ in range(1 + max(0, int(context.timing.contention_retries))):
        before = read_cpu()
        outcome = execute(case, context.timing)
        usage = outcome.measurement.cpu if outcome.measurement is not None else None
        verdict = judge(before, read_cpu(), os.cpu_count() or 1, usage, busy)
        tries.append((outcome, verdict))
        if not verdict.contended or not _measured(outcome):
            break
    outcome, verdict = _kept(tries)
    if len(tries) > 1:
        verdict = with_attempts(verdict, (tried.others_core_share for _, tried in tries))
    return store_outcome(case, outcome, context, verdict)


def _kept(tries: list[tuple[Outcome, Contention]]) -> tuple[Outcome, Contention]:
    """The last try where it is not contended (or not a measured success: a failure is kept as
    it happened), else the least contended one."""
    outcome, verdict = tries[-1]
    if not verdict.contended or not _measured(outcome):
        return tries[-1]
    return min(tries, key=lambda tried: tried[1].others_core_share or 0.0)


def run_cases(cases: Iterable[Case], context: RunContext) -> Iterator[Record]:
    """Yield each record as soon as it is stored, so a display can follow progress."""
    context.store.ensure_writable(context.environment["machine"])
    for case in cases:
        yield run_case(case, context)
