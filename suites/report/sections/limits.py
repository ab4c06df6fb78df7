"""What limits each figure: every usable case's `bound_by` verdict with its reason and the GPU
telemetry behind it, and a chart of the verdicts per device; a record without a verdict is listed
as not recorded, never dropped."""
from __future__ import annotations

import pandas as pd

from suites.records.bound_by import BUSY_SHARE, CLOCK_SHARE, EXCHANGE_SHARE, NEAR_ROOF
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.limits import NOT_RECORDED, verdict_counts
from suites.report.render import figures
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_fraction, fmt_number, fmt_text, tabulate
from suites.report.sections.base import CONFIG_COLUMNS, ReportOptions, gpu_columns, row_class, with_devices

TITLE, ANCHOR, NAV = "What limits each figure", "limits", "Limits"
VERDICT_TEXT = (
    f"communication: the cross-rank exchange takes ≥ {EXCHANGE_SHARE:.0%} of the step (DDP's no_sync probe); "
    f"launch: the device was busy < {BUSY_SHARE:.0%} of the step (profiler kernel time, else NVML utilization) — "
    f"the figure measures the host launching work; power: SM clocks below {CLOCK_SHARE:.0%} of their maximum with "
    f"a power or thermal clock-event reason (NVML); compute / memory: ≥ {NEAR_ROOF:.0%} of the roofline's bound "
    "at the case's arithmetic intensity (the compute roof scaled by the SM clock the GPU ran at), or of the "
    "clock-scaled peak where there is no byte count; unknown: none of these holds, with the reason.")


def columns(judged: pd.DataFrame) -> list[Column]:
    """The limits table's columns: the configuration's, then the verdict and what it rests on."""
    return [*CONFIG_COLUMNS, Column("problem", "problem", fmt_text), Column("throughput", "throughput", fmt_number),
            Column("unit", "throughput_unit", fmt_text), Column("bound by", "bound_by", fmt_text),
            Column("why", "bound_by_reason", fmt_text), Column("busy share", "device_busy_share", fmt_fraction),
            *gpu_columns(judged), Column("burst gain", "burst_gain", fmt_fraction)]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    rows = frame.usable
    section = Section(TITLE, ANCHOR, nav=NAV, text=[VERDICT_TEXT])
    judged = rows[rows["bound_by"].ne("")]
    unjudged = rows[rows["bound_by"].eq("")]
    if not unjudged.empty:
        machines = ", ".join(sorted(unjudged["machine"].unique()))
        section.text.append(
            f"{len(unjudged)} of {len(rows)} rows have no bound_by verdict: {NOT_RECORDED} (records older than the "
            f"field, or from asv / pytest-benchmark; machines: {machines}). They are listed below as '{NOT_RECORDED}', "
            f"not dropped: what limits their figures is unknown.")
    if not judged.empty:
        section.figures.append((figures.bound_by(verdict_counts(judged)), "cases per bound_by verdict and device"))
    if rows.empty:
        section.text.append("No usable row.")
        return section
    shown = with_devices(rows).assign(bound_by=rows["bound_by"].where(rows["bound_by"].ne(""), NOT_RECORDED))
    section.tables.append(tabulate(shown.sort_values(["bound_by", "machine", "problem"]), columns(shown),
                                   css=row_class))
    return section
