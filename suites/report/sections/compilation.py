"""Compilation: each compiled case beside its eager twin on the same machine: speedup, compile
time and the steps it takes to break even (`analyses.compilation`)."""
from __future__ import annotations

from suites.records.metric_registry import METRICS
from suites.report.analyses.compilation import compile_pairs
from suites.report.analyses.frame import ReportFrame
from suites.report.render.page import Section
from suites.report.render.tables import (Column, fmt_check, fmt_flag, fmt_number, fmt_ratio, fmt_seconds, fmt_text,
                                         tabulate)
from suites.report.sections.base import CONFIG_COLUMNS, PAIRING_TEXT, ReportOptions, ratio_order, row_class, \
    with_devices

TITLE, ANCHOR, NAV = "Compilation: speedup over eager, compile time and break-even", "compile", "Compile"
TEXT = (f"Each compiled case beside its eager twin (compile none, everything else the same, same machine). "
        f"speedup: {METRICS['compile_speedup'].formula}. compile s: first step − median step of the compiled case, "
        f"never part of its step time. break-even: {METRICS['compile_break_even_steps'].formula}. "
        f"recompiles: {METRICS['recompiles'].formula}. The check column is the compiled case's own numerics check.")
COLUMNS = [Column("problem", "problem", fmt_text), *CONFIG_COLUMNS, Column("speedup vs eager", "speedup", fmt_ratio),
           Column("noise", "noise_test", fmt_text), Column("paired", "pairing", fmt_text),
           Column("no ratio", "no_ratio", fmt_text), Column("median", "median_s", fmt_seconds),
           Column("eager median", "median_s_base", fmt_seconds), Column("compile s", "compile_s", fmt_number),
           Column("break-even steps", "break_even", fmt_text), Column("recompiles", "recompiles", fmt_number),
           Column("check", "check_passed", fmt_check), Column("check value", "check_value", fmt_number),
           Column("emulated", "emulated", fmt_flag)]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    pairs = compile_pairs(frame.records, frame.latest)
    section = Section(TITLE, ANCHOR, nav=NAV, text=[TEXT, PAIRING_TEXT])
    if pairs.empty:
        section.text.append("No pairs: no case ran compiled and eager on the same machine.")
        return section
    section.tables.append(tabulate(with_devices(ratio_order(pairs)), COLUMNS, css=row_class))
    return section
