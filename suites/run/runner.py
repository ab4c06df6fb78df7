"""Run cases end to end: availability, launch, record. Every finished case is stored at once."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from suites.run.availability import unavailable_reason
from suites.cases.case import Case
from suites.run.execute import Outcome, execute_in_process
from suites.kept.metrics import derive
from suites.kept.peaks import PeakTable
from suites.kept.provenance import environment, new_run_id, now_iso, threads_in_use
from suites.kept.record import Record
from suites.kept.store import ResultsStore
from suites.strategies import Launch, rules_for
from suites.run.timing import TimingConfig
from suites.cases.vocabulary import Status


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


def launch(case: Case, timing: TimingConfig) -> Outcome:
    rules = rules_for(case.strategy)
    if rules.launch is Launch.IN_PROCESS:
        return execute_in_process(case, timing)
    from suites.run.launchers import run_isolated, run_ranks

    return run_isolated(case, timing) if rules.launch is Launch.ISOLATED else run_ranks(case, timing)


def run_case(case: Case, context: RunContext,
             execute: Callable[[Case, TimingConfig], Outcome] = launch) -> Record:
    reason = unavailable_reason(case)
    outcome = Outcome(Status.UNAVAILABLE, reason) if reason else execute(case, context.timing)
    metrics = {}
    if outcome.measurement is not None:
        metrics = derive(case, outcome.measurement, context.store.root,
                         context.environment["machine"], context.peaks)
    record = Record(case=case, status=outcome.status, run_id=context.run_id, timestamp=now_iso(),
                    suite=context.suite, environment={**context.environment, "threads": threads_in_use()},
                    reason=outcome.reason, emulated=rules_for(case.strategy).emulated(case),
                    measurement=outcome.measurement, metrics=metrics, check=outcome.check,
                    details=outcome.details)
    context.store.append(record)
    return record


def run_cases(cases: Iterable[Case], context: RunContext) -> Iterator[Record]:
    """Yield each record as soon as it is stored, so a display can follow progress."""
    context.store.ensure_writable()
    for case in cases:
        yield run_case(case, context)
