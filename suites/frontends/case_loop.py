"""The cases of one `parbench run`, in order, under its cap: each unit of cases the cap admits
(`suites.runner.cap.units`: a compiled case with its eager twin, else one case) is run and every
record stored; what the cap leaves out is shown as left out. The display is told as each case ends."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from suites.cases.case import Case
from suites.frontends.run_progress import RunProgress
from suites.records.record import Record
from suites.runner.cap import RunCap, units
from suites.runner.eta import Eta
from suites.runner.runner import Plan, Runner


def run_cases(runner: Runner, cases: Sequence[Case], plans: Sequence[Plan], eta: Eta, cap: RunCap | None,
              progress: RunProgress, clock: Callable[[], float], run_started: float) -> list[Record]:
    """Run `cases` (planned as `plans`, estimated in `eta`) under `cap` (None: every case);
    the records stored, in order. `clock` read against `run_started` is the elapsed time shown."""
    records = []
    for unit in units(cases):
        admitted = cap is None or cap.admits(sum(eta.estimates[index] for index in unit), eta.scale())
        for index in unit:
            record = None
            if admitted or eta.estimates[index] <= 0:  # what costs nothing is recorded, capped or not
                started = clock()
                record = _capped(runner, cap, eta, index).run(plans[index])
                records.append(record)
                eta.finished(clock() - started)
            else:
                assert cap is not None
                cap.leave_out(cases[index])
                eta.left_out()
            progress.ended(index, cases[index], record, clock() - run_started, eta.remaining_s())
    return records


def _capped(runner: Runner, cap: RunCap | None, eta: Eta, index: int) -> Runner:
    """`runner`, measuring a contended case again only as many times as fit in the cap."""
    if cap is None:
        return runner
    retries = cap.retries_that_fit(eta.estimates[index], eta.scale(), runner.timing.contention_retries)
    if retries == runner.timing.contention_retries:
        return runner
    return replace(runner, timing=replace(runner.timing, contention_retries=retries))
