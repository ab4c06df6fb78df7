"""Relative performance, Lambda's way: per hardware and precision, the geometric mean over problems
of its best throughput over the reference's (`analyses.relative`), comparable rows only."""
from __future__ import annotations

from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.relative import NotComparableReference, relative_performance
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_number, fmt_ratio, fmt_text, tabulate
from suites.report.sections.base import ReportOptions

TITLE, ANCHOR = "Relative performance", "relative"
COLUMNS = [Column("hardware", "hardware", fmt_text), Column("precision", "precision", fmt_text),
           Column("relative performance", "relative", fmt_ratio), Column("problems", "problems", fmt_number)]
TEXT = ("Reference: {chosen} = 1.00. Per problem and precision, each hardware's best throughput over frameworks and "
        "strategies divided by the reference's; the geometric mean over the problems both measured. Only "
        "comparable rows count: emulated rows (several logical devices sharing one CPU are not hardware), "
        "contended, starved, bimodal, launch- or host-bound rows and rows above a peak are left out (see the "
        "summary's 'not comparable' line).")
NOTHING = "No comparable results to compare (see the summary's 'not comparable' line)."


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    try:
        table, chosen = relative_performance(frame, options.reference)
    except NotComparableReference as error:
        return Section(TITLE, ANCHOR, text=[f"No relative performance: {error}."])
    section = Section(TITLE, ANCHOR, text=[TEXT.format(chosen=chosen) if chosen else NOTHING])
    section.tables.append(tabulate(table, COLUMNS))
    return section
