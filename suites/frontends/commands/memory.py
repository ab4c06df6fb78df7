"""`parbench memory`: what each stored training case's peak memory is made of, beside its estimates."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from suites.cases.filters import select
from suites.errors import UserError
from suites.records.memory_breakdown import CATEGORIES, MEMORY_EXPLAINED
from suites.records.record import Record
from suites.records.store import DEFAULT_RESULTS_DIR, ResultsStore
from suites.report.render.terminal import terminal

SUMMARY = ("show what the peak memory of stored training records is made of (runtime, parameters, gradients, "
           "optimizer state, activations, temporaries, ...) beside each category's estimate")
KNOBS: tuple[str, ...] = ()
#: Categories shown as "measured / estimate", and the metric holding the estimate.
ESTIMATE_OF = {"parameters": "memory_parameters_estimate_bytes", "gradients": "memory_gradients_estimate_bytes",
               "optimizer": "memory_optimizer_estimate_bytes", "activations": "activation_bytes_per_device_estimate"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS_DIR,
                        help="results directory (default results/)")
    parser.add_argument("--run", help="one run's records (its run id); default: each case's latest record")
    parser.add_argument("--filter", help="choose cases (see `parbench run --help`)")
    parser.add_argument("--notes", action="store_true",
                        help="also print each record's explanation (why a category is off its estimate)")


def latest_explained(records: list[Record], run: str | None = None) -> list[Record]:
    """The records with a memory breakdown (of `run`, else each case's latest), in case order."""
    explained = [r for r in records if r.metrics.get("memory_runtime_bytes") is not None
                 and (run is None or r.run_id == run)]
    latest: dict[tuple[str, str], Record] = {}
    for record in sorted(explained, key=lambda r: r.timestamp):
        latest[(record.machine, record.case.id)] = record
    return list(latest.values())


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}" if abs(value) >= 10 * 2**20 else f"{value / 2**20:.2f}"


def cell(record: Record, category: str) -> str:
    """'measured / estimate' (MiB); activations: kept for backward, with the figure at the peak."""
    metrics = record.metrics
    measured = metrics.get(f"memory_{category}_bytes")
    if category not in ESTIMATE_OF:
        return mib(measured)
    estimate = metrics.get(ESTIMATE_OF[category])
    if category == "activations":
        kept = metrics.get("memory_activations_kept_bytes")
        return f"{mib(measured)} ({mib(kept)} kept) / {mib(estimate)}"
    return f"{mib(measured)} / {mib(estimate)}"


def label(record: Record) -> str:
    case, params = record.case, record.case.param_dict
    extra = "".join(f" {name}={params[name]}" for name in ("reshard", "schedule") if name in params)
    return f"{case.framework} {case.device}:{case.n_devices} {case.strategy}{extra}"


def table(records: list[Record]) -> Table:
    grid = Table(title="peak memory by category, MiB: measured / estimate (the rank or device of the largest peak)")
    grid.add_column("case")
    grid.add_column("peak", justify="right")
    for category in CATEGORIES:
        grid.add_column(category + (" / est" if category in ESTIMATE_OF else ""), justify="right")
    grid.add_column("unexplained", justify="right")
    grid.add_column("explained", justify="right")
    for record in records:
        fraction = record.metrics.get("memory_explained_fraction")
        grid.add_row(label(record), mib(record.metrics.get("peak_memory_bytes")),
                     *(cell(record, category) for category in CATEGORIES),
                     mib(record.metrics.get("memory_unexplained_bytes")),
                     "-" if fraction is None else f"{100 * fraction:.1f}%")
    return grid


def run(args: argparse.Namespace) -> int:
    records = latest_explained(ResultsStore(args.results).load(), args.run)
    if args.filter:
        chosen = set(select([r.case for r in records], args.filter, str(args.results)))
        records = [r for r in records if r.case in chosen]
    if not records:
        raise UserError(f"no record under {args.results} has a memory breakdown"
                        + (f" in run {args.run}" if args.run else "")
                        + "; run a training suite first, e.g. `parbench run --suite memory`")
    console = terminal()
    console.print(table(records))
    if args.notes:
        for record in records:
            console.print(f"\n[bold]{label(record)}[/bold]: {record.details.get(MEMORY_EXPLAINED, '')}",
                          highlight=False)
    return 0
