"""% of peak: each usable row's TFLOP/s against the peak table's and the calibrated peak; a row
above a peak is listed last and ranked nowhere (the peak table, or the timing, is wrong)."""
from __future__ import annotations

from suites.records.metric_registry import METRICS
from suites.report.analyses.frame import ReportFrame
from suites.report.render import figures
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_number, fmt_pct, fmt_text, tabulate
from suites.report.sections.base import CONFIG_COLUMNS, ReportOptions, row_class, with_devices

TITLE, ANCHOR = "% of peak", "peak"
TEXT = [f"% of peak (table): {METRICS['pct_peak_table'].formula}.",
        f"% of peak (measured): {METRICS['pct_peak_measured'].formula}."]
COLUMNS = [*CONFIG_COLUMNS, Column("problem", "problem", fmt_text), Column("TFLOP/s", "tflops", fmt_number),
           Column("% peak (table)", "pct_peak_table", fmt_pct),
           Column("% peak (measured)", "pct_peak_measured", fmt_pct),
           Column("device name", "device_name", fmt_text), Column("note", "peak_note", fmt_text)]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    rows = frame.usable
    rows = rows[rows["pct_peak_table"].notna() | rows["pct_peak_measured"].notna()]
    section = Section(TITLE, ANCHOR, text=list(TEXT))
    if rows.empty:
        section.text.append("No row has a peak to compare with (no FLOP count, or no peak known for the device).")
        return section
    above = rows["pct_peak_table"].gt(100) | rows["pct_peak_measured"].gt(100)
    if above.any():
        devices = sorted(set(rows.loc[above, "machine"] + " · " + rows.loc[above, "device"] + " "
                             + rows.loc[above, "device_name"].where(rows.loc[above, "device_name"].ne(""),
                                                                    "(unnamed)")))
        section.text.append(
            f"Above the peak ({int(above.sum())} rows, on {'; '.join(devices)}): the peak table is wrong for this "
            f"device (or the timing is), so these figures are not ranked: they are listed last, drawn in no chart, "
            f"and in no ratio, rank or price.")
    ranked = rows[~above]
    if ranked["pct_peak_table"].notna().any():
        section.figures.append((figures.peak(ranked[ranked["pct_peak_table"].notna()]),
                                "percent of peak per configuration (rows above a peak left out)"))
    ordered = rows.assign(above=above).sort_values(["above", "pct_peak_table"], ascending=[True, False], kind="stable")
    ordered["peak_note"] = ordered["above"].map({True: "above the peak: the peak table is wrong for this device",
                                                 False: ""})
    section.tables.append(tabulate(with_devices(ordered), COLUMNS, css=row_class))
    return section
