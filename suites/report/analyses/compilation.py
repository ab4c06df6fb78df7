"""Compiled cases against their eager twins: speedup, compile time and break-even steps.

A compiled case's twin is the row with `compile = none` and every other identity column equal
(same machine, device, framework, strategy, precision, workload and parameters; an inductor
case's `compile_mode` is a parameter its twin does not have, so it is set aside before pairing).
The figures are the registry's (`compile_speedup`, `compile_break_even_steps`), computed here
because only the report sees both rows.
"""
from __future__ import annotations

import pandas as pd

from suites.records.metric_registry import METRICS, Work
from suites.report.load.columns import params_text
from suites.report.analyses.comparison import speedup

#: Parameters of a compiler (`StrategyPlugin.compile_params`) that its eager twin lacks.
COMPILER_PARAMS = ("compile_mode",)


def _without_compiler_params(frame: pd.DataFrame) -> pd.DataFrame:
    """`params` and `problem` without the compiler's own parameters, so a twin matches."""
    columns = [f"param_{name}" for name in COMPILER_PARAMS if f"param_{name}" in frame]
    if not columns:
        return frame
    has_own = frame[columns].notna().any(axis=1)

    def strip(text: str) -> str:
        return params_text(dict(item.split("=", 1) for item in text.split(",")
                                if item and item.split("=", 1)[0] not in COMPILER_PARAMS))
    params = frame["params"].where(~has_own, frame.loc[has_own, "params"].map(strip))
    problem = frame["problem"].where(~has_own, (frame["workload"] + " " + params).str.strip())
    return frame.assign(params=params, problem=problem)  # copy-on-write: the other columns are not copied


def break_even_text(steps: float | None) -> str:
    """'never' where compiling saves no time per step, else the step count, rounded up."""
    if steps is None or pd.isna(steps):
        return "never"
    return f"{int(-(-steps // 1)):,}"


def _with_mode(frame: pd.DataFrame) -> pd.DataFrame:
    """`compile` with the compiler's mode beside its name (e.g. 'inductor (max-autotune)'), and
    the rows' params and problem without it, as their eager twins have them."""
    mode = frame.get("param_compile_mode")
    labelled = frame.assign(compile=frame["compile"] if mode is None else [
        f"{name} ({value})" if isinstance(value, str) and value not in ("", "default") else name
        for name, value in zip(frame["compile"], mode.astype(object).where(mode.notna(), ""))])
    return _without_compiler_params(labelled)


def compile_pairs(frame: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Each usable compiled row of `current` (the latest of `frame`) with its eager twin (`_base`
    columns), `speedup` (throughput ratio, the noise verdict beside it), `break_even_steps` and
    its text `break_even`; the compiler's mode stays visible in `compile` (e.g. 'inductor (max-autotune)')."""
    pairs = speedup(_with_mode(frame), _with_mode(current), {"compile": "none"})
    if pairs.empty:
        return pairs.assign(break_even_steps=pd.Series(dtype=float), break_even=pd.Series(dtype=str))
    metric = METRICS["compile_break_even_steps"]
    # Only a pair that gives a ratio gives a break-even (`speedup`'s rules: same run, none contended).
    known = [pd.notna(row.compile_s) and pd.notna(row.speedup) for row in pairs.itertuples()]
    steps = [metric.value(Work(median_s=row.median_s, compile_s=row.compile_s, eager_median_s=row.median_s_base))
             if ok else None for ok, row in zip(known, pairs.itertuples())]
    pairs["break_even_steps"] = pd.Series(steps, index=pairs.index, dtype=float)
    pairs["break_even"] = [break_even_text(value) if ok else "" for value, ok in zip(steps, known)]
    return pairs
