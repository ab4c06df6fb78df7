"""Speedup of each configuration against a chosen baseline, with a noise verdict per pair.

speedup = throughput / throughput of the baseline row that differs only in the baseline's
columns (e.g. baseline {"precision": "fp32"} pairs a bf16 row with the fp32 row of the same
machine, device, framework, strategy and workload). Throughput, not step time, so that rows
doing different work per step (weak scaling) compare as work per second.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from suites.report.columns import IDENTITY
from suites.report.noise import verdict
from suites.report.selection import latest, usable

#: Columns kept from the baseline row (suffixed `_base`).
BASE_COLUMNS = ["throughput", "median_s", "samples_s", "q1_s", "q3_s", "noisy", "emulated", *IDENTITY]


def parse_baseline(items: Sequence[str]) -> dict[str, str]:
    """["device=cpu", "strategy=single"] -> {"device": "cpu", "strategy": "single"}."""
    baseline = {}
    for item in items:
        column, sep, value = item.partition("=")
        if not sep or column not in IDENTITY:
            raise ValueError(f"baseline {item!r}: expected COLUMN=VALUE with COLUMN one of {', '.join(IDENTITY)}")
        baseline[column] = value
    return baseline


def matches(frame: pd.DataFrame, values: Mapping[str, Any]) -> pd.Series:
    """Rows whose columns equal `values` (compared as text, so '1' matches n_devices 1)."""
    mask = pd.Series(True, index=frame.index)
    for column, value in values.items():
        mask &= frame[column].astype(str).eq(str(value))
    return mask


#: `noise_test` of a pair one of whose rows does no work per step to divide by (a one-GPU
#: all-reduce moves no bytes: busbw 0): no ratio, no verdict.
NO_WORK = "-"


def per_unit_work(samples: tuple[float, ...], q1: float, q3: float, throughput: float,
                  median: float) -> tuple[list[float], tuple[float, float]] | None:
    """Seconds per unit of work: step times divided by the work one step does; None where a
    step does no work (throughput 0) or its work is unknown."""
    work = throughput * median
    if not work > 0 or not np.isfinite(work):
        return None
    return [s / work for s in samples], (q1 / work, q3 / work)


def positive(values: pd.Series) -> pd.Series:
    """`values` where above 0, else NaN: what a ratio may divide by (shown as '-')."""
    return values.where(values.gt(0))


def noise_columns(pairs: pd.DataFrame) -> pd.DataFrame:
    """`beyond_noise`, `noise_test` for each row of a frame holding a row and its `_base`."""
    def judge(row: pd.Series) -> pd.Series:
        a = per_unit_work(row["samples_s"], row["q1_s"], row["q3_s"], row["throughput"], row["median_s"])
        b = per_unit_work(row["samples_s_base"], row["q1_s_base"], row["q3_s_base"],
                          row["throughput_base"], row["median_s_base"])
        if a is None or b is None:
            return pd.Series({"beyond_noise": False, "noise_test": NO_WORK, "p_value": np.nan})
        result = verdict(*a, *b)
        return pd.Series({"beyond_noise": result.beyond_noise, "noise_test": str(result),
                          "p_value": result.p_value if result.p_value is not None else np.nan})
    if pairs.empty:
        return pd.DataFrame(columns=["beyond_noise", "noise_test", "p_value"], index=pairs.index)
    return pairs.apply(judge, axis=1)


def speedup(frame: pd.DataFrame, baseline: Mapping[str, Any], free: Sequence[str] = ()) -> pd.DataFrame:
    """Every usable row paired with its baseline row, with `speedup` and the noise verdict.

    `free` names identity columns that may also differ from the baseline row (comparing a
    strategy with `single` also frees `n_devices`). The baseline rows themselves are left out.
    """
    rows = usable(latest(frame))
    base = rows[matches(rows, baseline)]
    keys = [c for c in IDENTITY if c not in baseline and c not in free]
    pairs = rows.merge(base[BASE_COLUMNS].rename(columns=lambda c: f"{c}_base")
                       .rename(columns={f"{k}_base": k for k in keys}), on=keys)
    differs = pd.Series(False, index=pairs.index)
    for column in [*baseline, *free]:
        differs |= pairs[column].astype(str).ne(pairs[f"{column}_base"].astype(str))
    pairs = pairs[differs].reset_index(drop=True)
    pairs["speedup"] = pairs["throughput"] / positive(pairs["throughput_base"])
    return pd.concat([pairs, noise_columns(pairs)], axis=1)


def describe(baseline: Mapping[str, Any]) -> str:
    return ", ".join(f"{column}={value}" for column, value in baseline.items())
