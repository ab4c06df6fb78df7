"""Precision: each lower precision's speedup over fp32 on the same machine, paired within a run
(C5), beside its numerics check."""
from __future__ import annotations

from suites.report.analyses.comparison import speedup
from suites.report.analyses.frame import ReportFrame
from suites.report.render import figures
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_check, fmt_flag, fmt_number, fmt_ratio, fmt_text, tabulate
from suites.report.sections.base import CONFIG_COLUMNS, PAIRING_TEXT, ReportOptions, ratio_order, row_class, \
    with_devices

TITLE, ANCHOR, NAV = "Precision: speedup over fp32, with the numerics check", "precision", "Precision"
TEXT = ("speedup = throughput in the lower precision / fp32 throughput of the same case on the same machine. "
        "The check column is the lower-precision case's numerics check (kernels: against float64 NumPy; training: "
        "against the fp32 loss trajectory); a case that fails it is a failed case and is listed below instead.")
COLUMNS = [*CONFIG_COLUMNS, Column("problem", "problem", fmt_text), Column("speedup vs fp32", "speedup", fmt_ratio),
           Column("noise", "noise_test", fmt_text), Column("paired", "pairing", fmt_text),
           Column("no ratio", "no_ratio", fmt_text), Column("check", "check_passed", fmt_check),
           Column("check metric", "check_metric", fmt_text), Column("check value", "check_value", fmt_number),
           Column("emulated", "emulated", fmt_flag)]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    pairs = speedup(frame.records, frame.latest, {"precision": "fp32"})
    section = Section(TITLE, ANCHOR, nav=NAV, text=[TEXT, PAIRING_TEXT])
    if pairs.empty:
        section.text.append("No pairs: no case ran in fp32 and in another precision on the same machine.")
        return section
    if pairs["speedup"].notna().any():
        section.figures.append((figures.precision(pairs), "speedup of each precision over fp32"))
    section.tables.append(tabulate(with_devices(ratio_order(pairs)), COLUMNS, css=row_class))
    return section
