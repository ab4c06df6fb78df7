"""Which rows may enter a ratio, a rank, a price or a crown, and why not: decided once, per row.

Every section that draws a ratio, a speedup, a rank, a "fastest" / "cheapest" / "most per watt"
crown or a relative-performance value reads the flags this module adds to the tidy table
(report-guide.md §3, rules C2 and C3), and none decides for itself:

- `comparable`: the row may stand in a cross-machine ratio, a rank, a price comparison or a crown.
- `pairable`: the row may stand in a ratio within its own machine (a precision, compile or
  strategy speedup, a scaling curve): a usable row whose only reasons are `WITHIN_MACHINE_CODES`
  (emulated: labelled "emulation"; launch- or host-bound: the same host on both sides).
- `why_not`: the first code of `CODES` that holds ('' where comparable); `why_not_text`: every
  reason that holds, in words, "; "-separated.

A flag the record does not carry (older records, asv, pytest-benchmark) reads as not raised:
a record that predates `contention`, `bound_by` or `bimodal` is not assumed guilty of them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: code -> (how the text begins after "the X row ", the reason in words). In priority order:
#: C2 (the row is not a usable measurement), then C3 (a measurement that cannot be ranked).
CODES: dict[str, tuple[str, str]] = {
    "unavailable": ("was ", "unavailable"),
    "failed": ("", "failed"),
    "failed-check": ("", "failed its numerics check"),
    "no-throughput": ("has ", "no throughput"),
    "no-work": ("is ", "n/a (1 rank): a step does no work to divide by (a one-rank all-reduce moves no bytes)"),
    "above-peak": ("is ", "above the peak: the peak table is wrong for this device (or the timing is)"),
    "bimodal": ("is ", "bimodal: its step times fall in two clusters, so its median is neither"),
    "contended": ("is ", "contended: other work competed for the CPU while it ran"),
    "starved": ("is ", "starved: its own processes kept under half of its cores busy, so the figure measures "
                       "fewer cores than it was given"),
    "launch-bound": ("is ", "launch-bound: the device was busy a small share of each step, so the figure "
                            "measures the host launching work"),
    "host-bound": ("is ", "host-bound: the figure measures the host or its input, not the device"),
    "emulated": ("is ", "emulated: its logical devices or ranks share one CPU (or fewer GPUs), so it measures "
                        "the emulation, not hardware"),
}
#: Codes of rows that are not a usable measurement at all (rule C2).
UNUSABLE_CODES = ("unavailable", "failed", "failed-check", "no-throughput")
#: Codes that still allow a ratio within the row's own machine (rule C5).
WITHIN_MACHINE_CODES = ("emulated", "launch-bound", "host-bound")
#: `bound_by` verdicts that make a figure measure the host (the record side may add "host"/"input").
HOST_VERDICTS = {"launch": "launch-bound", "host": "host-bound", "input": "host-bound", "host/input": "host-bound"}
#: Short names of the codes, for counts ("12 contended, 4 above the peak").
SHORT = {"unavailable": "unavailable", "failed": "failed", "failed-check": "failed check",
         "no-throughput": "no throughput", "no-work": "n/a (1 rank)", "above-peak": "above the peak",
         "bimodal": "bimodal", "contended": "contended", "starved": "starved", "launch-bound": "launch-bound",
         "host-bound": "host-bound", "emulated": "emulated"}


def _flag(frame: pd.DataFrame, column: str) -> pd.Series:
    """A true/false column read defensively: absent or empty is False."""
    if column not in frame:
        return pd.Series(False, index=frame.index)
    return frame[column].astype("boolean").fillna(False).astype(bool)


def _text(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame:
        return pd.Series("", index=frame.index)
    return frame[column].fillna("").astype(str)


def _number(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame:
        return pd.Series(np.nan, index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce")


def _detail(values: pd.Series, template: str) -> pd.Series:
    """' (detail)' where there is one, else ''."""
    return pd.Series([template.format(value) if value else "" for value in values.fillna("").astype(str)],
                     index=values.index, dtype=object)


def reasons(frame: pd.DataFrame) -> dict[str, tuple[pd.Series, pd.Series]]:
    """code -> (rows it holds for, detail text to append), for every code of `CODES`."""
    status = _text(frame, "status")
    throughput = _number(frame, "throughput")
    check = frame["check_passed"].astype("boolean") if "check_passed" in frame else pd.Series(pd.NA, index=frame.index)
    ok = status.eq("ok")
    failed_check = ok & check.eq(False).fillna(False).astype(bool)
    measured = ok & ~failed_check & throughput.notna()
    table_peak, measured_peak = _number(frame, "pct_peak_table"), _number(frame, "pct_peak_measured")
    above = table_peak.gt(100) | measured_peak.gt(100)
    peak_text = pd.Series([
        ", ".join(part for part in (f"{t:.0f}% of the peak table" if t > 100 else "",
                                    f"{m:.0f}% of the measured peak" if m > 100 else "") if part)
        for t, m in zip(table_peak.fillna(0), measured_peak.fillna(0))], index=frame.index, dtype=object)
    bound = _text(frame, "bound_by").str.lower()
    host_code = bound.map(HOST_VERDICTS).fillna("")
    empty = pd.Series("", index=frame.index)
    check_detail = pd.Series([f"{metric} {'' if pd.isna(value) else f'{value:.3g}'}".strip()
                              for metric, value in zip(_text(frame, "check_metric"), _number(frame, "check_value"))],
                             index=frame.index, dtype=object)
    return {
        "unavailable": (status.eq("unavailable"), _detail(_text(frame, "reason"), " ({})")),
        "failed": (status.eq("failed"), _detail(_text(frame, "reason"), " ({})")),
        "failed-check": (failed_check, _detail(check_detail, " ({})")),
        "no-throughput": (ok & ~failed_check & throughput.isna(), empty),
        "no-work": (measured & throughput.le(0), empty),
        "above-peak": (measured & above, _detail(peak_text, " ({})")),
        "bimodal": (measured & _flag(frame, "bimodal"), empty),
        "contended": (measured & _flag(frame, "contended"), _detail(_text(frame, "contention"), " ({})")),
        "starved": (measured & _flag(frame, "starved"), empty),
        "launch-bound": (measured & host_code.eq("launch-bound"), empty),
        "host-bound": (measured & host_code.eq("host-bound"), empty),
        "emulated": (measured & _flag(frame, "emulated"), empty),
    }


def flag(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `comparable`, `pairable`, `why_not` and `why_not_text` (see the module)."""
    frame = frame.copy(deep=False)
    held = reasons(frame)
    codes: list[list[str]] = [[] for _ in range(len(frame))]
    texts: list[list[str]] = [[] for _ in range(len(frame))]
    for name, (mask, detail) in held.items():
        head, sep, tail = CODES[name][1].partition(": ")
        for position in np.flatnonzero(mask.fillna(False).to_numpy(dtype=bool)):
            # a detail goes after the reason's first clause: "contended (load 4.1 on 2 cores): other work ..."
            codes[position].append(name)
            texts[position].append(f"{head}{detail.iat[position]}{sep}{tail}")
    frame["comparable"] = [not held_codes for held_codes in codes]
    frame["pairable"] = [all(code in WITHIN_MACHINE_CODES for code in held_codes) for held_codes in codes]
    frame["why_not"] = pd.Series([held_codes[0] if held_codes else "" for held_codes in codes],
                                 index=frame.index, dtype=object)
    frame["why_not_text"] = pd.Series(["; ".join(words) for words in texts], index=frame.index, dtype=object)
    frame["comparable"] = frame["comparable"].astype(bool)
    frame["pairable"] = frame["pairable"].astype(bool)
    return frame


def sentence(code: str, text: str) -> str:
    """'is contended (…)' / 'failed its numerics check (…)': what follows "the X row "."""
    return f"{CODES[code][0]}{text}" if code in CODES else text


def counts_text(frame: pd.DataFrame) -> str:
    """'12 contended, 4 above the peak, ...' over `frame`'s not-comparable rows ('' if none)."""
    codes = frame.loc[~frame["comparable"].astype(bool), "why_not"]
    counts = codes.value_counts()
    return ", ".join(f"{counts[code]} {SHORT[code]}" for code in CODES if code in counts)
