"""Run cases end to end: availability, launch, record. Every finished case is stored at once."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from suites.strategies.jobs import job_for
from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.kept.contention import Contention, judge, read_cpu
from suites.kept.bound_by import diagnose, signals_of
from suites.kept.metrics import case_work, derive
from suites.kept.peaks import PeakTable
from suites.kept.provenance import (discovered_accelerators, environment, new_run_id, now_iso,
                                   threads_in_use)
from suites.kept.record import Record
from suites.kept.store import ResultsStore
from suites.run.availability import unavailable_reason
from suites.run.execute import Outcome
from suites.run.launchers import launch_case


@dataclass
class RunContext:
    suite: str
    store: ResultsStore
    timing: TimingConfig
    label: str | None = None
    run_id: str = ""

    def __post_init__(self) -> None:
        self.run_id = self.run_id or new_run_id()
        self.environment = environment(self.label)
        self.peaks = PeakTable.load()


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


def store_outcome(case: Case, outcome: Outcome, context: RunContext,
                  contention: Contention | None = None) -> Record:
    """Attach provenance and derived metrics to what running `case` produced; store the record."""
    metrics = {}
    bound_by = None
    details = outcome.details
    if outcome.measurement is not None:
        metrics = derive(case, outcome.measurement, context.store.root,
                         context.environment["machine"], context.peaks)
        energy = outcome.measurement.energy
        if energy is not None and energy.measured:
            details = {**details, "energy_per_device": energy.per_device(
                case_work(case)["samples_per_step"], case.n_devices)}
        if outcome.status is Status.OK:
            bound_by = diagnose(signals_of(case, outcome.measurement, metrics))
    record = Record(case=case, status=outcome.status, run_id=context.run_id, timestamp=now_iso(),
                    suite=context.suite, environment={**context.environment, "threads": threads_in_use(),
                                                      "accelerators": discovered_accelerators()},
                    reason=outcome.reason, emulated=job_for(case).emulated,
                    measurement=outcome.measurement, metrics=metrics, check=outcome.check,
                    details=details, contention=contention, bound_by=bound_by)
    context.store.append(record)
    return record


def run_cases(cases: Iterable[Case], context: RunContext) -> Iterator[Record]:
    """Yield each record as soon as it is stored, so a display can follow progress."""
    context.store.ensure_writable()
    for case in cases:
        yield run_case(case, context)
