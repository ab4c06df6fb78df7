"""`parbench compare A B`: two runs or machines case by case, with ratios and a noise verdict."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..display import number, seconds
from ..errors import UserError
from ..store import DEFAULT_RESULTS_DIR

help = "compare two runs or machines (paths, machine labels or run ids) case by case, with noise"

STYLES = {"B faster": "green", "B slower": "bold red", "same (within noise)": "dim"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the reference: a results path, machine label or run id")
    parser.add_argument("b", metavar="B", help="compared with A: a results path, machine label or run id")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS_DIR,
                        help="where machine labels and run ids are looked up (default results/)")
    parser.add_argument("--fail-on-regression", type=float, metavar="THRESHOLD",
                        help="exit 1 if B is slower than A by more than THRESHOLD (0.05 = 5%%) beyond noise on "
                             "any case, or a case ok in A failed in B")


def _value(value: float | None, render) -> str:  # noqa: ANN001
    return "-" if value is None or value != value else render(value)


def table(pairs, a: str, b: str) -> Table:  # noqa: ANN001
    out = Table(title=f"A = {a}   vs   B = {b}   (ratio = throughput B / A; > 1: B faster)")
    for column, justify in (("case", "left"), ("A median", "right"), ("B median", "right"), ("unit", "left"),
                            ("A thr", "right"), ("B thr", "right"), ("B/A", "right"), ("noise", "left"),
                            ("verdict", "left")):
        out.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in pairs.itertuples(index=False):
        verdict = Text(row.verdict, style=STYLES.get(row.verdict, "yellow"))
        if row.emulated is True or row.emulated_base is True:
            verdict.append(" (emulated)", style="cyan")
        out.add_row(Text(row.case_id), _value(row.median_s_base, seconds), _value(row.median_s, seconds),
                    Text(row.throughput_unit if isinstance(row.throughput_unit, str) and row.throughput_unit
                         else str(row.throughput_unit_base or "")),
                    _value(row.throughput_base, number), _value(row.throughput, number),
                    _value(row.ratio, lambda r: f"{r:.3f}"), Text(str(row.noise_test or "")), verdict)
    return out


def run(args: argparse.Namespace) -> int:
    from ..report.runs import compare, regressions, select

    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise UserError(f"--fail-on-regression must be >= 0 (0.05 = 5%), got {args.fail_on_regression}")
    loaded: dict = {}
    a, b = select(args.a, args.results, loaded), select(args.b, args.results, loaded)
    pairs = compare(a.frame, b.frame)
    console = Console()
    console.print(table(pairs, a.description, b.description))
    counts = pairs["verdict"].value_counts()
    console.print(", ".join(f"{count} {verdict}" for verdict, count in counts.items()), markup=False)
    if args.fail_on_regression is None:
        return 0
    regressed = regressions(pairs, args.fail_on_regression)
    if regressed.empty:
        console.print(f"no regression beyond {args.fail_on_regression:.0%} and noise", markup=False)
        return 0
    console.print(f"{len(regressed)} regression(s) beyond {args.fail_on_regression:.0%} and noise: "
                  f"{', '.join(regressed['case_id'])}", style="bold red", markup=False)
    return 1
