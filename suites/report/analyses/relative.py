"""Relative performance in the style of Lambda's GPU benchmarks: one number per hardware.

For each problem (workload + parameters) and precision, a hardware configuration's best
throughput (over frameworks and strategies) is divided by the reference configuration's on
the same problem and precision; the summary is the geometric mean of those ratios over the
problems both measured. 1.0 = as fast as the reference. Only `comparable` rows count
(suites.report.analyses.comparability): emulated rows (several logical devices sharing one CPU are not
hardware), contended, starved, bimodal, launch- or host-bound rows and rows above a peak are
left out, so no ratio rests on a figure that measures something else. A geometric mean, because ratios
multiply: a config twice as fast on one problem and half as fast on another averages to 1.0.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from suites.report.analyses.comparability import counts_text
from suites.report.analyses.frame import ReportFrame


def hardware_label(frame: pd.DataFrame) -> pd.Series:
    return frame["machine"] + " · " + frame["device"] + "×" + frame["n_devices"].astype(str)


def best_per_problem(rows: pd.DataFrame) -> pd.DataFrame:
    """Per machine's hardware, precision and problem, the best throughput of `rows` (the comparable ones)."""
    rows = rows.assign(hardware=lambda f: hardware_label(f))
    return rows.groupby(["machine", "hardware", "precision", "problem"], as_index=False)["throughput"].max()


class NotComparableReference(Exception):
    """The wanted reference ran, but none of its rows is comparable: the page says why."""


def _named(labels: pd.Series, wanted: str) -> pd.Series:
    return (labels == wanted) | labels.str.startswith(f"{wanted} · ")


def pick_reference(best: pd.DataFrame, wanted: str | None, left_out: pd.DataFrame | None = None) -> str | None:
    """`wanted` as a hardware label, or a machine label (its best-covered hardware); by default
    the hardware that measured the most problems (ties: alphabetical). ValueError where `wanted`
    has no usable results; NotComparableReference where it has some (among `left_out`, the usable
    rows that are not comparable), none comparable."""
    coverage = best.groupby("hardware")["problem"].nunique()
    if wanted:
        candidates = coverage[_named(coverage.index.to_series(), wanted).to_numpy()]
        if candidates.empty:
            if left_out is not None and not left_out.empty and _named(hardware_label(left_out), wanted).any():
                rows = left_out[_named(hardware_label(left_out), wanted)]
                raise NotComparableReference(f"reference {wanted!r} has no comparable row ({counts_text(rows)}), "
                                             f"so no ratio can be taken against it")
            raise ValueError(f"reference {wanted!r} has no usable results; known: {', '.join(coverage.index)}")
        coverage = candidates
    if coverage.empty:
        return None
    return sorted(coverage.index, key=lambda label: (-coverage[label], label))[0]


def relative_performance(frame: ReportFrame, reference: str | None = None) -> tuple[pd.DataFrame, str | None]:
    """(table: hardware x precision -> geomean of throughput ratios and problem count, reference)."""
    best = best_per_problem(frame.comparable)
    chosen = pick_reference(best, reference, frame.not_comparable)
    if chosen is None:
        return pd.DataFrame(columns=["machine", "hardware", "precision", "relative", "problems"]), None
    ref = best[best["hardware"].eq(chosen)][["precision", "problem", "throughput"]]
    ratios = best.merge(ref, on=["precision", "problem"], suffixes=("", "_ref"))
    ratios["log_ratio"] = np.log(ratios["throughput"] / ratios["throughput_ref"])
    table = (ratios.groupby(["machine", "hardware", "precision"], as_index=False)
             .agg(log_mean=("log_ratio", "mean"), problems=("problem", "nunique")))
    table["relative"] = np.exp(table["log_mean"])
    table = table.drop(columns="log_mean").sort_values(["precision", "relative"], ascending=[True, False])
    return table.reset_index(drop=True), chosen


def reference_machine(frame: ReportFrame, reference: str | None = None) -> str | None:
    """The machine label of the relative performance's reference (None where there is none, or
    where the wanted one has no comparable row)."""
    try:
        table, chosen = relative_performance(frame, reference)
    except NotComparableReference:
        return None
    return table.loc[table["hardware"].eq(chosen), "machine"].iloc[0] if chosen else None
