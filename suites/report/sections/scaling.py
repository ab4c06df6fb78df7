"""Scaling: speedup and efficiency against device count, each curve from one run on one machine
(`analyses.scaling`), weak or strong as the case declares; the points left out and why."""
from __future__ import annotations

from suites.report.analyses.comparability import counts_text
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.scaling import left_out, scaling
from suites.report.render import figures
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_flag, fmt_fraction, fmt_number, fmt_ratio, fmt_text, tabulate
from suites.report.sections.base import ReportOptions, row_class

TITLE, ANCHOR = "Scaling", "scaling"
TEXT = ("efficiency = thr(N) / (N · thr(1)), all points of a curve from one run on one machine. Weak scaling keeps the "
        "per-device batch fixed (global batch N · batch); strong scaling (declared by the case: scaling=strong) keeps "
        "the global batch fixed. Emulated devices share one CPU: their curves measure the emulation, not hardware. "
        "A contended, starved or bimodal point, or one above a peak, is left out of its curve.")
COLUMNS = [Column("machine", "machine", fmt_text), Column("framework", "framework", fmt_text),
           Column("device", "device", fmt_text), Column("strategy", "strategy", fmt_text),
           Column("precision", "precision", fmt_text), Column("problem", "problem", fmt_text),
           Column("scaling", "scaling", fmt_text), Column("N", "n_devices", fmt_number),
           Column("throughput", "throughput", fmt_number), Column("unit", "throughput_unit", fmt_text),
           Column("speedup", "speedup", fmt_ratio), Column("efficiency", "efficiency", fmt_fraction),
           Column("emulated", "emulated", fmt_flag), Column("run", "run_id", fmt_text)]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    curves = scaling(frame.records)
    section = Section(TITLE, ANCHOR, text=[TEXT])
    dropped = left_out(frame.records)
    if not dropped.empty:
        section.text.append(f"Left out of the scaling curves ({len(dropped)} rows): {counts_text(dropped)}.")
    if curves.empty:
        section.text.append("No scaling curves: no run measured the same case on 1 and more devices successfully.")
        return section
    section.figures.append((figures.scaling(curves), "scaling speedup and efficiency against device count"))
    section.tables.append(tabulate(curves, COLUMNS, css=row_class))
    return section
