"""Scaling over device counts, from rows of the same machine and run.

efficiency(N) = throughput(N) / (N * throughput(1)), throughput = samples/s of all devices.
Under weak scaling (the default: per-device batch fixed, global batch = N x batch) that equals
T(1)/T(N); under strong scaling (param scaling="strong": global batch fixed and split) it
equals T(1)/(N*T(N)). Which one a curve is comes from the case's `scaling` parameter and is
shown beside it. 1.0 is perfect; emulated devices share one CPU, so their efficiency measures
the emulation, not hardware. Only `pairable` rows make a point (suites.report.analyses.comparability): a
contended, starved or bimodal row, or one above a peak, is left out (`left_out` lists them).
"""
from __future__ import annotations

import pandas as pd

from suites.report.analyses.selection import pairable, usable

#: A scaling series: one curve, all from one run on one machine.
SERIES = ["machine", "run_id", "framework", "device", "strategy", "precision", "compile", "workload", "params"]


def scaling_mode(frame: pd.DataFrame) -> pd.Series:
    declared = frame["param_scaling"] if "param_scaling" in frame else pd.Series("", index=frame.index)
    return declared.fillna("").replace("", "weak").astype(str)


def scaling(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (series, N) with `speedup` over N=1 and `efficiency`; for each series key
    without run_id, only the latest run that measured at least two device counts."""
    rows = pairable(frame).sort_values("timestamp", kind="stable")
    rows = rows.drop_duplicates(subset=[*SERIES, "n_devices"], keep="last")
    one = rows[rows["n_devices"].eq(1)][[*SERIES, "throughput"]].rename(columns={"throughput": "throughput_1"})
    curves = rows.merge(one, on=SERIES)
    counts = curves.groupby(SERIES)["n_devices"].transform("nunique")
    curves = curves[counts >= 2].copy(deep=False)
    curves["speedup"] = curves["throughput"] / curves["throughput_1"]
    curves["efficiency"] = curves["speedup"] / curves["n_devices"].astype(float)
    curves["scaling"] = scaling_mode(curves)
    newest = curves.groupby([c for c in SERIES if c != "run_id"])["timestamp"].transform("max")
    runs_latest = curves.groupby(SERIES)["timestamp"].transform("max").eq(newest)
    return curves[runs_latest].sort_values([*SERIES, "n_devices"]).reset_index(drop=True)


def left_out(frame: pd.DataFrame) -> pd.DataFrame:
    """Usable rows kept out of a curve they would be a point of (not `pairable`): their series
    measured at least two device counts."""
    rows = usable(frame)
    counts = rows.groupby(SERIES)["n_devices"].transform("nunique")
    return rows[counts.ge(2) & ~rows["pairable"].astype(bool)]
