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
    "probably-launch-bound": ("is ", "probably launch-bound: not a hardware figure (a GPU training step this "
                                     "short, with no bound_by verdict, is the size the records that carry one "
                                     "find launch-bound)"),
    "host-bound": ("is ", "host-bound: the figure measures the host or its input, not the device"),
    "emulated": ("is ", "emulated: its logical devices or ranks share one CPU (or fewer GPUs), so it measures "
                        "the emulation, not hardware"),
}
#: Codes of rows that are not a usable measurement at all (rule C2).
UNUSABLE_CODES = ("unavailable", "failed", "failed-check", "no-throughput")
#: Codes that still allow a ratio within the row's own machine (rule C5).
WITHIN_MACHINE_CODES = ("emulated", "launch-bound", "probably-launch-bound", "host-bound")
#: A GPU training step shorter than this, in a record without a `bound_by` verdict (records before
#: it), is "probably launch-bound". `suites.records.bound_by` gives no step time (its rule is the
#: device's busy share, `BUSY_SHARE`); this is what that rule found on the sample records that carry
#: a verdict: every single-GPU training step of the H200 up to 1.7 ms (mlp, batch 32) is launch-bound,
#: busy 6-9% of the step, and none of 39 ms or more (ResNet-50, BERT-base, GPT-2 small). 5 ms keeps
#: three times the longest launch-bound step.
SHORT_GPU_STEP_S = 0.005
#: Notes a row carries that leave it comparable: code -> the note in words (`notes`).
NOTES: dict[str, str] = {
    "above-calibrated-peak": "calibrated peak below a measured figure: run calibrate again when quiet "
                             "(a stored peak is a maximum, so the figure above it flags the calibration, not the row)",
}
#: `bound_by` verdicts that make a figure measure the host (the record side may add "host"/"input").
HOST_VERDICTS = {"launch": "launch-bound", "host": "host-bound", "input": "host-bound", "host/input": "host-bound"}
#: Short names of the codes, for counts ("12 contended, 4 above the peak").
SHORT = {"unavailable": "unavailable", "failed": "failed", "failed-check": "failed check",
         "no-throughput": "no throughput", "no-work": "n/a (1 rank)", "above-peak": "above the peak",
         "bimodal": "bimodal", "contended": "contended", "starved": "starved", "launch-bound": "launch-bound",
         "probably-launch-bound": "probably launch-bound",
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


def short_gpu_step(frame: pd.DataFrame) -> pd.Series:
    """GPU training rows whose median step is under `SHORT_GPU_STEP_S`."""
    return (_text(frame, "device").eq("gpu") & _text(frame, "workload").eq("train_step")
            & _number(frame, "median_s").lt(SHORT_GPU_STEP_S))


def notes(frame: pd.DataFrame) -> dict[str, pd.Series]:
    """code of `NOTES` -> the rows it holds for: a measured figure above the calibrated peak
    (`pct_peak_measured` over 100) that is not above the table's."""
    above_calibrated = _number(frame, "pct_peak_measured").gt(100) & ~_number(frame, "pct_peak_table").gt(100)
    return {"above-calibrated-peak": above_calibrated & _text(frame, "status").eq("ok")}


def energy_why_not(frame: pd.DataFrame) -> pd.Series:
    """Why a row's energy figures (power, work per joule) enter no ratio, in words; '' where they may:
    a reading from a window too short for its counter, or averaging more than the board's limit."""
    flags, window = _text(frame, "energy_flags"), _number(frame, "energy_window_s")
    watts, limit = _number(frame, "energy_watts"), _number(frame, "energy_power_limit_w")
    n = _number(frame, "n_devices").fillna(1).clip(lower=1)
    texts = []
    for flagged, seconds, power, cap, devices in zip(flags, window, watts, limit, n):
        said = []
        if "over_limit" in flagged:
            said.append(f"{power / devices:.0f} W per board above its {cap:.0f} W limit: the meter is wrong")
        if "short_window" in flagged:
            said.append(f"read over {seconds:.2g} s, too short for its counter")
        texts.append("; ".join(said))
    return pd.Series(texts, index=frame.index, dtype=object)


def reasons(frame: pd.DataFrame) -> dict[str, tuple[pd.Series, pd.Series]]:
    """code -> (rows it holds for, detail text to append), for every code of `CODES`."""
    status = _text(frame, "status")
    throughput = _number(frame, "throughput")
    check = frame["check_passed"].astype("boolean") if "check_passed" in frame else pd.Series(pd.NA, index=frame.index)
    ok = status.eq("ok")
    failed_check = ok & check.eq(False).fillna(False).astype(bool)
    measured = ok & ~failed_check & throughput.notna()
    # Above the table's peak is a timing error; above only the calibrated one flags the calibration
    # (a stored peak is a maximum: a later figure above it), not the row (`NOTES`).
    table_peak = _number(frame, "pct_peak_table")
    above = table_peak.gt(100)
    peak_text = pd.Series([f"{t:.0f}% of the peak table" if t > 100 else "" for t in table_peak.fillna(0)],
                          index=frame.index, dtype=object)
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
        "probably-launch-bound": (measured & short_gpu_step(frame) & bound.eq(""),
                                  _detail(_number(frame, "median_s").mul(1000).map("{:.2g} ms".format), " ({})")),
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
    held_notes = {code: mask.fillna(False).to_numpy(dtype=bool) for code, mask in notes(frame).items()}
    frame["notes"] = pd.Series(["; ".join(NOTES[code] for code, mask in held_notes.items() if mask[position])
                                for position in range(len(frame))], index=frame.index, dtype=object)
    # A flagged energy reading is kept (the power shows, with why), but no ratio is drawn from it.
    frame["energy_why_not"] = energy_why_not(frame)
    if "throughput_per_watt" in frame:
        frame["throughput_per_watt"] = frame["throughput_per_watt"].where(frame["energy_why_not"].eq(""))
    return frame


def sentence(code: str, text: str) -> str:
    """'is contended (…)' / 'failed its numerics check (…)': what follows "the X row "."""
    return f"{CODES[code][0]}{text}" if code in CODES else text


def counts_text(frame: pd.DataFrame) -> str:
    """'12 contended, 4 above the peak, ...' over `frame`'s not-comparable rows ('' if none)."""
    codes = frame.loc[~frame["comparable"].astype(bool), "why_not"]
    counts = codes.value_counts()
    return ", ".join(f"{counts[code]} {SHORT[code]}" for code in CODES if code in counts)
