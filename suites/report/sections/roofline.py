"""Roofline of the kernels: one chart per device (machine, kind, model) over its kernel cases (a
fleet: one per device type), and their table."""
from __future__ import annotations

from suites.records.metric_registry import METRICS
from suites.report.analyses.frame import ReportFrame
from suites.report.render import figures
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_fraction, fmt_number, fmt_text, tabulate
from suites.report.sections.base import CONFIG_COLUMNS, ReportOptions, row_class, with_devices

TITLE, ANCHOR, NAV = "Roofline of the kernels", "roofline", "Roofline"
TEXT = [f"arithmetic intensity: {METRICS['arithmetic_intensity'].formula}.",
        f"bound: {METRICS['roofline_bound_tflops'].formula}; roof: {METRICS['roof_peak_tflops'].formula}; "
        f"bandwidth: {METRICS['roof_bandwidth_gbs'].formula}.",
        "of bound = TFLOP/s / bound. Left of a ridge point a kernel is bound by memory bandwidth, right of it by "
        "the peak."]
COLUMNS = [*CONFIG_COLUMNS, Column("problem", "problem", fmt_text),
           Column("FLOP/byte", "arithmetic_intensity", fmt_number), Column("TFLOP/s", "tflops", fmt_number),
           Column("bound TFLOP/s", "roofline_bound_tflops", fmt_number),
           Column("of bound", "roofline_fraction", fmt_fraction), Column("ridge side", "ridge_side", fmt_text),
           Column("peak TFLOP/s", "roof_peak_tflops", fmt_number), Column("GB/s", "roof_bandwidth_gbs", fmt_number),
           Column("device name", "device_name", fmt_text)]
#: Up to this many rooflines, one per machine's device; more: one per device type.
MAX_ROOFLINES = 4
ROOF = ["arithmetic_intensity", "tflops", "roof_peak_tflops", "roof_bandwidth_gbs"]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    rows = frame.usable
    kernels = rows[rows["arithmetic_intensity"].notna() & rows["tflops"].notna()]
    section = Section(TITLE, ANCHOR, nav=NAV, text=list(TEXT))
    roofed = kernels.dropna(subset=ROOF)
    if len(roofed) < len(kernels):
        section.text.append(f"{len(kernels) - len(roofed)} kernel rows have no roof: their device has no peak or no "
                            "bandwidth known (a CPU's is measured by `parbench calibrate` before the run; a GPU's is "
                            "peaks.toml's bandwidth_gbs).")
    if roofed.empty:
        section.text.append("No kernel row has a roofline to draw.")
        return section
    roofed = roofed.assign(ridge=roofed["roof_peak_tflops"] * 1000.0 / roofed["roof_bandwidth_gbs"])
    roofed = roofed.assign(ridge_side=roofed["arithmetic_intensity"].lt(roofed["ridge"]).map(
        {True: "memory", False: "compute"}))
    by_machine = roofed.groupby(["machine", "device", "device_name"], sort=True)
    if by_machine.ngroups <= MAX_ROOFLINES:
        for (machine, device, name), group in by_machine:
            label = f"{machine} · {device} · {name}" if name else f"{machine} · {device}"
            section.figures.append((figures.roofline(group, label), f"roofline of {label}"))
    else:  # a fleet: one chart per device type, its machines' points together, each precision's median roof
        section.text.append(f"{roofed['machine'].nunique()} machines: one roofline per device type, the points of "
                            f"all its machines together; each roof is the median of its machines' roofs.")
        for (device, name), group in roofed.groupby(["device", "device_name"], sort=True):
            roofs = group.groupby("precision")[["roof_peak_tflops", "roof_bandwidth_gbs"]].transform("median")
            label = f"{device} · {name}" if name else device
            label += f" ({group['machine'].nunique()} machines)"
            section.figures.append((figures.roofline(group.assign(**roofs), label), f"roofline of {label}"))
    section.tables.append(tabulate(with_devices(roofed).sort_values(["machine", "device", "arithmetic_intensity"]),
                                   COLUMNS, css=row_class))
    return section
