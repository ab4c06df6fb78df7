"""`parbench compare A B`: two runs or machines case by case, with ratios and a noise verdict."""
from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from rich.table import Table
from rich.text import Text

from suites.errors import UserError
from suites.frontends.commands.report import results_argument, results_problems
from suites.records.store import DEFAULT_RESULTS_DIR, ResultsWarning
from suites.report.analyses.comparison import NO_WORK
from suites.report.render.terminal import seconds, terminal

SUMMARY = "compare two runs or machines (paths, machine labels or run ids) case by case, with noise"
KNOBS: tuple[str, ...] = ()

STYLES = {"B faster": "green", "B slower": "bold red", "same": "dim"}
#: --fail-on-regression takes a finite fraction 0 <= T < MAX_THRESHOLD: 0 fails any slowdown beyond
#: noise, 9.99 one of almost 11x. NaN, infinities and larger values would switch the gate off
#: silently (no case can be that much slower), so they are refused, as are negative values.
MAX_THRESHOLD = 10.0
THRESHOLD_ACCEPTED = f"a fraction from 0 to under {MAX_THRESHOLD:g} (0.05 = 5% slower)"
#: Exit status of a gate whose verdict cannot be trusted: a case it judged ran beside other work
#: (contended), its threads idled (starved) or its samples split in two (bimodal), on either side.
#: Interference only adds time, so it can fake a regression (B) or hide one (A): no pass, no fail.
INCONCLUSIVE = 3
#: The record flags (`suites.records.contention`) that make a pair's verdict untrustworthy.
UNTRUSTED = ("contended", "starved", "bimodal")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", type=results_argument,
                        help="the reference: a results path, machine label or run id")
    parser.add_argument("b", metavar="B", type=results_argument,
                        help="compared with A: a results path, machine label or run id")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS_DIR,
                        help="where machine labels and run ids are looked up (default results/)")
    parser.add_argument("--fail-on-regression", metavar="THRESHOLD",
                        help="exit 1 if B is slower than A by more than THRESHOLD (0.05 = 5%%) beyond noise on "
                             "any case, or a case ok in A failed in B; exit 2 if A and B share no case that ran; "
                             f"exit {INCONCLUSIVE} (inconclusive) where no case regressed but a case judged was "
                             "contended, starved or bimodal on either side. "
                             f"THRESHOLD is {THRESHOLD_ACCEPTED.replace('%', '%%')}")


def regression_threshold(value: str | float | None) -> float | None:
    """The --fail-on-regression threshold as a float (None: no gate); UserError outside
    0 <= T < MAX_THRESHOLD or when not a number, never a gate that cannot fail."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and 0 <= number < MAX_THRESHOLD):
        raise UserError(f"--fail-on-regression {value!r} is not valid: expected {THRESHOLD_ACCEPTED}")
    return number


def _value(value: float | None, render: Callable[[float], str]) -> str:
    return "-" if value is None or value != value else render(value)


def _flag(value: Any) -> bool:
    return False if pd.isna(value) else bool(value)


def _noise(row: Any) -> str:
    if isinstance(row.p_value, float) and row.p_value == row.p_value:
        return f"p={row.p_value:.1g}"
    if not isinstance(row.noise_test, str) or not row.noise_test:
        return ""
    if row.noise_test == NO_WORK:  # a side does no work per step (1-rank all-reduce): nothing was tested
        return "n/a"
    return "IQRs apart" if _flag(row.beyond_noise) else "IQRs overlap"


def untrusted(pairs: pd.DataFrame) -> pd.Series:
    """Pairs that ran ok on both sides where either side's record is flagged `UNTRUSTED`."""
    flagged = pd.Series(False, index=pairs.index)
    for flag in UNTRUSTED:
        for column in (flag, f"{flag}_base"):
            if column in pairs:
                flagged |= pairs[column].map(_flag).astype(bool)
    return pairs["ratio"].notna() & flagged


def untrusted_text(pairs: pd.DataFrame) -> str:
    """e.g. '2 contended in A, 2 contended in B, 1 bimodal in B' over the `untrusted` pairs."""
    parts = []
    for side, suffix in (("A", "_base"), ("B", "")):
        for flag in UNTRUSTED:
            column = flag + suffix
            count = int(pairs[column].map(_flag).sum()) if column in pairs else 0
            if count:
                parts.append(f"{count} {flag} in {side}")
    return ", ".join(parts)


def table(pairs: pd.DataFrame, a: str, b: str, notes: pd.Series | None = None) -> Table:
    """The pairs; with `notes` (a regression gate's `regression_notes`), each slowdown that is no
    regression says why beside its verdict."""
    out = Table(title=f"A = {a}  vs  B = {b}", caption="B/A = throughput B / throughput A (> 1: B faster); "
                "noise: Mann-Whitney p on raw samples, else IQR overlap")
    out.add_column("case", overflow="fold", min_width=20)
    for column in ("A median", "B median", "B/A"):
        out.add_column(column, justify="right", no_wrap=True)
    out.add_column("noise", no_wrap=True)
    out.add_column("verdict", min_width=9)
    for index, row in zip(pairs.index, pairs.itertuples(index=False)):
        verdict = Text(row.verdict, style=STYLES.get(row.verdict, "yellow"))
        if _flag(row.emulated) or _flag(row.emulated_base):
            verdict.append(" emulated", style="cyan")
        note = notes.get(index, "") if notes is not None else ""
        if note:
            verdict.append(f"; no regression: {note}", style="dim")
        out.add_row(Text(row.case_id), _value(row.median_s_base, seconds), _value(row.median_s, seconds),
                    _value(row.ratio, lambda r: f"{r:.3f}"), _noise(row), verdict)
    return out


def run(args: argparse.Namespace) -> int:
    from suites.report.analyses.runs import compare, gate_problem, regression_notes, regressions, select
    from suites.strategies.jobs import case_work

    threshold = regression_threshold(args.fail_on_regression)
    loaded: dict = {}
    with warnings.catch_warnings(record=True) as said:  # said after the sides are known to hold results
        warnings.simplefilter("always")
        sides = []
        for spec in (args.a, args.b):
            try:
                sides.append(select(spec, args.results, loaded, case_work))
            except OSError as error:  # a name too long for a path, a folder that cannot be read
                shown = spec if len(spec) <= 40 else f"{spec[:40]}... ({len(spec)} characters)"
                raise UserError(f"{shown!r}: {error.strerror}; pass a results file or folder, machine label or "
                                f"run id") from None
        a, b = sides
    for side, spec in ((a, args.a), (b, args.b)):
        if side.frame.empty:  # one line: what was skipped on the way is why it holds nothing
            raise UserError(f"{spec} holds no results: nothing to compare; pass a results file or folder, "
                            f"machine label or run id with parbench, asv or pytest-benchmark records")
    for message in results_problems(said):
        print(f"warning: {message}", file=sys.stderr)
    for warning in said:
        if not issubclass(warning.category, ResultsWarning):
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    pairs = compare(a.frame, b.frame)
    problem = gate_problem(pairs, "A", "B") if threshold is not None else None
    notes = regression_notes(pairs, threshold) if threshold is not None else None
    console = terminal()
    console.print(table(pairs, a.description, b.description, notes))
    counts = pairs["verdict"].value_counts()
    console.print(", ".join(f"{count} {verdict}" for verdict, count in counts.items()), markup=False)
    if problem:
        raise UserError(problem)
    slower = int(pairs["verdict"].eq("B slower").sum())
    if threshold is None:
        if slower:
            console.print(f"{slower} slower beyond noise; not judged as regressions: no --fail-on-regression "
                          f"THRESHOLD given", markup=False)
        if untrusted(pairs).any():
            console.print(f"not to be trusted: {untrusted_text(pairs[untrusted(pairs)])}", markup=False)
        return 0
    doubtful = untrusted(pairs)
    regressed = regressions(pairs, threshold)
    regressed = regressed[~doubtful.reindex(regressed.index, fill_value=False)]
    if regressed.empty and doubtful.any():
        judged = int(pairs["ratio"].notna().sum())
        console.print(f"inconclusive: {int(doubtful.sum())} of {judged} case(s) judged ran beside other work or "
                      f"unevenly ({untrusted_text(pairs[doubtful])}): a slowdown there cannot be told from "
                      f"interference; run A and B again on a quiet machine (exit {INCONCLUSIVE})",
                      style="bold yellow", markup=False)
        return INCONCLUSIVE
    if regressed.empty:
        why = f" ({slower} slower beyond noise, none by more than the threshold: see each verdict)" if slower else ""
        console.print(f"no regression beyond {threshold:.0%} and noise{why}", markup=False)
        return 0
    console.print(f"{len(regressed)} regression(s) beyond {threshold:.0%} and noise: "
                  f"{', '.join(regressed['case_id'])}", style="bold red", markup=False)
    return 1
