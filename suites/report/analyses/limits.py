"""The report's view of what limits each figure: the `bound_by` verdicts, the GPU clocks and power
behind them, and the summary's warnings about figures that measure the host or a power cap."""
from __future__ import annotations

import pandas as pd

from suites.records.bound_by import BUSY_SHARE, CLOCK_SHARE, EXCHANGE_SHARE, NEAR_ROOF, VERDICTS
from suites.report.load.columns import config_label
from suites.report.analyses.selection import latest, usable
from suites.report.render.tables import Format, fmt_fraction, fmt_number, fmt_text, fmt_watts

#: What the limits table says where a record has no `bound_by` (older records, asv, pytest-benchmark).
NOT_RECORDED = "not recorded"

VERDICT_TEXT = (
    f"communication: the cross-rank exchange takes ≥ {EXCHANGE_SHARE:.0%} of the step (DDP's no_sync probe); "
    f"launch: the device was busy < {BUSY_SHARE:.0%} of the step (profiler kernel time, else NVML utilization) — "
    f"the figure measures the host launching work; power: SM clocks below {CLOCK_SHARE:.0%} of their maximum with "
    f"a power or thermal clock-event reason (NVML); compute / memory: ≥ {NEAR_ROOF:.0%} of the roofline's bound "
    "at the case's arithmetic intensity (the compute roof scaled by the SM clock the GPU ran at), or of the "
    "clock-scaled peak where there is no byte count; unknown: none of these holds, with the reason.")


def gpu_columns(group: pd.DataFrame) -> list[tuple[str, str, Format]]:
    """Clock and power columns, where any row of `group` has GPU telemetry."""
    if not group["gpu_sm_clock_mhz"].notna().any() and not group["gpu_power_w"].notna().any():
        return []
    return [("SM MHz", "gpu_sm_clock_mhz", fmt_number), ("max MHz", "gpu_max_sm_clock_mhz", fmt_number),
            ("GPU power", "gpu_power_w", fmt_watts), ("power limit", "gpu_power_limit_w", fmt_watts),
            ("°C max", "gpu_temperature_c", fmt_number), ("clock events", "gpu_clock_events", fmt_text)]


def limit_columns(group: pd.DataFrame) -> list[tuple[str, str, Format]]:
    """The verdict, then the GPU's clocks and power where measured: beside a table's throughput."""
    verdict = [("bound by", "bound_by", fmt_text)] if group["bound_by"].ne("").any() else []
    return [*verdict, *gpu_columns(group)]


def _named(rows: pd.DataFrame) -> str:
    return "; ".join(sorted(set(config_label(rows) + " · " + rows["problem"])))


def limits_summary(frame: pd.DataFrame) -> list[str]:
    """Sentences for the summary naming the launch-bound and power-capped results."""
    rows = usable(latest(frame))
    lines = []
    for device, launched in rows[rows["bound_by"].eq("launch")].groupby("device", sort=True):
        lines.append(f"Launch-bound ({len(launched)}): {_named(launched)}. The {device} was busy a small share of "
                     f"each step: this figure measures the host, not the "
                     f"{device.upper() if device == 'gpu' else device}.")
    capped = rows[rows["bound_by"].eq("power")]
    if not capped.empty:
        lines.append(f"Power-capped ({len(capped)}): {_named(capped)}. The clocks were held below their maximum by "
                     "the power or thermal limit: the figure is the card's at its power limit, and another card or "
                     "limit of the same chip can differ.")
    return lines


def verdict_counts(judged: pd.DataFrame) -> pd.DataFrame:
    """Cases per verdict (columns, in `VERDICTS` order) and device (rows: machine · kind · name)."""
    labels = judged["machine"] + " · " + judged["device"] + " · " + judged["device_name"]
    return (judged.assign(label=labels).groupby(["label", "bound_by"]).size().unstack(fill_value=0)
            .reindex(columns=[v for v in VERDICTS if v in set(judged["bound_by"])]))


def verdict_table_columns(judged: pd.DataFrame) -> list[tuple[str, str, Format]]:
    """The limits table's columns after the configuration's."""
    return [("problem", "problem", fmt_text), ("throughput", "throughput", fmt_number),
            ("unit", "throughput_unit", fmt_text), ("bound by", "bound_by", fmt_text),
            ("why", "bound_by_reason", fmt_text), ("busy share", "device_busy_share", fmt_fraction),
            *gpu_columns(judged), ("burst gain", "burst_gain", fmt_fraction)]
