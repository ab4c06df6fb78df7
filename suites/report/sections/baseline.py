"""Speedup of each configuration against a baseline (`parbench report --baseline`; by default the
reference machine of several, or the single-device strategy on one), each pair with its noise
verdict, and why a pair gives no ratio."""
from __future__ import annotations

import pandas as pd

from suites.report.analyses.comparison import describe, speedup
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.relative import reference_machine
from suites.report.analyses.selection import usable
from suites.report.load.columns import CONFIG, config_label
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_flag, fmt_ratio, fmt_text, tabulate
from suites.report.sections.base import PAIRING_TEXT, ReportOptions, ratio_order, row_class

ANCHOR, NAV = "baseline", "Speedup vs baseline"
COLUMNS = [Column("problem", "problem", fmt_text), Column("configuration", "config", fmt_text),
           Column("baseline", "baseline_config", fmt_text), Column("speedup", "speedup", fmt_ratio),
           Column("noise", "noise_test", fmt_text), Column("paired", "pairing", fmt_text),
           Column("no ratio", "no_ratio", fmt_text), Column("emulated", "emulated", fmt_flag)]
ACROSS_MACHINES_TEXT = ("Across machines both rows must be comparable: real hardware, none contended, starved, "
                        "bimodal, launch- or host-bound, or above a peak; where not, 'no ratio' says why.")


def default_baseline(frame: ReportFrame, reference: str | None) -> tuple[dict[str, str], list[str]]:
    """Several machines: the reference machine (of the relative performance). One machine:
    single-device strategy."""
    machines = usable(frame.records)["machine"].unique()
    chosen = reference_machine(frame, reference) if len(machines) > 1 else None
    if chosen:
        return {"machine": chosen}, []
    return {"strategy": "single"}, ["n_devices"]


def chosen_baseline(frame: ReportFrame, options: ReportOptions) -> tuple[dict[str, str], list[str]]:
    """(the baseline's columns and values, the identity columns that may also differ)."""
    if options.baseline:
        return options.baseline, ["n_devices"] if "strategy" in options.baseline else []
    return default_baseline(frame, options.reference)


def _baseline_labels(pairs: pd.DataFrame) -> pd.Series:
    base = pd.DataFrame({c: pairs[f"{c}_base"] if f"{c}_base" in pairs else pairs[c] for c in CONFIG})
    return config_label(base)


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    baseline, free = chosen_baseline(frame, options)
    pairs = speedup(frame.records, frame.latest, baseline, free)
    section = Section(f"Speedup vs baseline ({describe(baseline)})", ANCHOR, nav=NAV, text=[
        f"Each configuration against the row that differs only in {', '.join([*baseline, *free])}; "
        f"speedup = throughput / baseline throughput. Choose another baseline with "
        f"`parbench report --baseline COLUMN=VALUE`."])
    section.text.append(PAIRING_TEXT if "machine" not in baseline else ACROSS_MACHINES_TEXT)
    if pairs.empty:
        section.text.append("No pairs: no usable row has a matching baseline row.")
        return section
    pairs["config"] = config_label(pairs)
    pairs["baseline_config"] = _baseline_labels(pairs)
    section.tables.append(tabulate(ratio_order(pairs), COLUMNS, css=row_class))
    return section
