"""Unavailable and failed cases: the latest record of each on each machine, with its reason."""
from __future__ import annotations

from suites.report.analyses.frame import ReportFrame
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_flag, fmt_id, fmt_text, tabulate
from suites.report.sections.base import ReportOptions, row_class

TITLE, ANCHOR = "Unavailable and failed cases", "not-ok"
COLUMNS = [Column("status", "status", fmt_text), Column("machine", "machine", fmt_text),
           Column("case", "case_id", fmt_id), Column("reason", "reason", fmt_text),
           Column("emulated", "emulated", fmt_flag), Column("source", "source", fmt_text),
           Column("run", "run_id", fmt_text), Column("file", "path", fmt_id)]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    rows = frame.not_ok.sort_values(["status", "machine", "case_id"])
    section = Section(TITLE, ANCHOR, text=[
        f"{(rows['status'] == 'unavailable').sum()} unavailable, {(rows['status'] == 'failed').sum()} failed "
        f"(latest record of each case on each machine). Unavailable: the hardware or software is not there; "
        f"failed: the case crashed or computed the wrong thing."])
    section.tables.append(tabulate(rows, COLUMNS, css=row_class))
    return section
