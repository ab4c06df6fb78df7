"""What limits each figure: the `bound_by` verdicts counted per device, and the summary's warnings
about figures that measure the host or a power cap."""
from __future__ import annotations

import pandas as pd

from suites.records.bound_by import VERDICTS
from suites.report.load.columns import config_label

#: What the limits table says where a record has no `bound_by` (older records, asv, pytest-benchmark).
NOT_RECORDED = "not recorded"


def _named(rows: pd.DataFrame) -> str:
    return "; ".join(sorted(set(config_label(rows) + " · " + rows["problem"])))


def limits_summary(rows: pd.DataFrame) -> list[str]:
    """Sentences for the summary naming the launch-bound and power-capped results among `rows`
    (the latest usable ones)."""
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
