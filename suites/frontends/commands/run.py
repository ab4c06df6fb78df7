"""`parbench run`: run a suite with a live progress display; store every record; print a table."""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from suites import knobs
from suites.cases.filters import __doc__ as filter_help
from suites.cases.filters import select
from suites.cases.grid import DEFAULT_SUITE, load_suite
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.kept.store import DEFAULT_RESULTS_DIR, ResultsStore
from suites.report.display import record_table, terminal
from suites.run.eta import Eta, duration_text
from suites.run.runner import RunContext, run_cases

SUMMARY = "run a suite (default: quick) and store its records"
KNOBS = knobs.CASE_KNOBS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = filter_help
    parser.add_argument("--suite", default=DEFAULT_SUITE,
                        help=f"built-in suite name or path of a .toml grid (default {DEFAULT_SUITE})")
    parser.add_argument("--filter", help="choose cases, e.g. \"framework=torch matmul\"")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS_DIR,
                        help="results directory (default results/)")
    parser.add_argument("--label", help="machine label stored with every record "
                                        "(default $PARBENCH_MACHINE or the hostname)")
    parser.add_argument("--budget", type=float, help="override the suite's timing budget per case, seconds")


def run(args: argparse.Namespace) -> int:
    knobs.check_label(args.label)
    suite = load_suite(args.suite)
    cases = select(suite.cases, args.filter, suite.name)
    timing = suite.timing
    if args.budget is not None:
        if not 0 < args.budget < math.inf:
            raise UserError(f"--budget must be a finite positive number of seconds, got {args.budget}")
        timing = replace(timing, budget_s=args.budget)
    store = ResultsStore(args.results)
    context = RunContext(suite=suite.name, store=store, timing=timing, label=args.label)
    console = terminal()
    records = []
    eta = Eta.for_cases(cases, timing)
    console.print(f"{suite.name}: {len(cases)} cases, about {duration_text(eta.remaining_s())}", markup=False)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("~{task.fields[left]} left"),
                  TextColumn("{task.fields[current]}"), console=console, transient=True) as progress:
        task = progress.add_task(suite.name, total=len(cases), current=cases[0].id,
                                 left=duration_text(eta.remaining_s()))
        started = time.monotonic()
        for done, record in enumerate(run_cases(cases, context), start=1):
            records.append(record)
            now = time.monotonic()
            eta.finished(now - started)
            started = now
            progress.update(task, advance=1, current=cases[done].id if done < len(cases) else "",
                            left=duration_text(eta.remaining_s()))
    console.print(record_table(records, title=f"suite {suite.name} - run {context.run_id}"))
    failed = sum(r.status is Status.FAILED for r in records)
    counts = {s: sum(r.status is s for r in records) for s in Status}
    console.print(f"{counts[Status.OK]} ok, {counts[Status.UNAVAILABLE]} unavailable, {failed} failed; "
                  f"records in {store.path_for(context.environment['machine'])}")
    return 1 if failed else 0
