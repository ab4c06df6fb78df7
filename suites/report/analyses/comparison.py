"""Speedup of each configuration against a chosen baseline, with a noise verdict per pair.

A pair is made only from rows the comparability flags allow (suites.report.analyses.comparability; report-guide
C3 and C5): where none can be, the row says why instead of showing a number.

speedup = throughput / throughput of the baseline row that differs only in the baseline's
columns (e.g. baseline {"precision": "fp32"} pairs a bf16 row with the fp32 row of the same
machine, device, framework, strategy and workload). Throughput, not step time, so that rows
doing different work per step (weak scaling) compare as work per second.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from suites.report.load.columns import ENVIRONMENT, IDENTITY
from suites.report.analyses.comparability import sentence
from suites.report.analyses.noise import verdicts
from suites.report.analyses.selection import usable

#: Columns kept from the baseline row (suffixed `_base`).
BASE_COLUMNS = ["throughput", "median_s", "samples_s", "q1_s", "q3_s", "noisy", "emulated", *IDENTITY]
#: Columns of the target row that the pairing, its ratio, reason and noise verdict read.
TARGET_COLUMNS = ["throughput", "median_s", "samples_s", "q1_s", "q3_s", "emulated", "run_id", "why_not",
                  "why_not_text"]
#: Columns of the baseline row that decide whether a pair may be made.
PAIR_COLUMNS = ["case_id", "run_id", "timestamp", "status", "comparable", "pairable", "why_not", "why_not_text"]


def parse_baseline(items: Sequence[str]) -> dict[str, str]:
    """["device=cpu", "strategy=single"] -> {"device": "cpu", "strategy": "single"}; ValueError (naming
    --baseline) for an item that is no COLUMN=VALUE of a known column with a value."""
    baseline = {}
    for item in items:
        column, sep, value = item.partition("=")
        if not sep or column not in IDENTITY:
            raise ValueError(f"--baseline {item!r}: expected COLUMN=VALUE with COLUMN one of {', '.join(IDENTITY)}")
        if not value.strip():  # would match no record, or every blank cell: never what was meant
            raise ValueError(f"--baseline {item!r}: no value; expected COLUMN=VALUE, e.g. {column}=VALUE")
        baseline[column] = value
    return baseline


#: Values a `baseline_problem` line lists at most (a fleet has thousands of machine labels).
SHOWN_VALUES = 12


def baseline_problem(frame: pd.DataFrame, baseline: Mapping[str, Any]) -> str | None:
    """Why `baseline` matches no row of `frame` (the records loaded), naming --baseline and the values
    the records have; None where a row matches. A baseline that matches nothing pairs nothing: the
    speedup table would be empty for a typo."""
    if matches(frame, baseline).any():
        return None
    for column, value in baseline.items():
        present = sorted(set(frame[column].dropna().astype(str)))
        if str(value) not in present:
            shown = ", ".join(present[:SHOWN_VALUES]) + (f" and {len(present) - SHOWN_VALUES} more"
                                                          if len(present) > SHOWN_VALUES else "")
            return (f"--baseline {column}={value} matches no record loaded: their {column} is "
                    f"{'one of ' if len(present) > 1 else ''}{shown or 'not set'}; give one of those")
    return (f"--baseline {describe(baseline)} matches no record loaded: each value is some record's, but no "
            f"record has them all; drop a --baseline or give values one record has together")


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
                  median: float) -> tuple[np.ndarray, tuple[float, float]] | None:
    """Seconds per unit of work: step times divided by the work one step does; None where a
    step does no work (throughput 0) or its work is unknown."""
    work = throughput * median
    if not work > 0 or not np.isfinite(work):
        return None
    return np.asarray(samples, dtype=float) / work, (q1 / work, q3 / work)


def positive(values: pd.Series) -> pd.Series:
    """`values` where above 0, else NaN: what a ratio may divide by (shown as '-')."""
    return values.where(values.gt(0))


#: Pairs judged at a time: a fleet's pairs (60,000 across 1,000 machines) as sample arrays at
#: once would be the report's peak memory.
NOISE_CHUNK = 4_096


def noise_columns(pairs: pd.DataFrame) -> pd.DataFrame:
    """`beyond_noise`, `noise_test` for each row of a frame holding a row and its `_base`
    (`noise.verdicts`: the pairs' tests vectorised, a chunk of pairs at a time)."""
    if pairs.empty:
        return pd.DataFrame(columns=["beyond_noise", "noise_test", "p_value"], index=pairs.index)
    if len(pairs) > NOISE_CHUNK:
        return pd.concat([noise_columns(pairs.iloc[start:start + NOISE_CHUNK])
                          for start in range(0, len(pairs), NOISE_CHUNK)])
    sides = [(per_unit_work(s, q1, q3, t, m), per_unit_work(sb, q1b, q3b, tb, mb))
             for s, q1, q3, t, m, sb, q1b, q3b, tb, mb in zip(
                 pairs["samples_s"], pairs["q1_s"], pairs["q3_s"], pairs["throughput"], pairs["median_s"],
                 pairs["samples_s_base"], pairs["q1_s_base"], pairs["q3_s_base"], pairs["throughput_base"],
                 pairs["median_s_base"])]
    judged = [index for index, (a, b) in enumerate(sides) if a is not None and b is not None]
    results = dict(zip(judged, verdicts([(*sides[index][0], *sides[index][1]) for index in judged])))
    rows = [{"beyond_noise": results[index].beyond_noise, "noise_test": str(results[index]),
             "p_value": results[index].p_value if results[index].p_value is not None else np.nan}
            if index in results else {"beyond_noise": False, "noise_test": NO_WORK, "p_value": np.nan}
            for index in range(len(pairs))]
    return pd.DataFrame(rows, index=pairs.index)


#: `pairing` of a ratio: both rows from one run; from two runs of one environment (rule C5's
#: fallback, labelled so); from two machines (both rows `comparable`).
SAME_RUN, ACROSS_RUNS, ACROSS_MACHINES = "same run", "across runs", "across machines"
EMULATION = "emulation"


def _side_label(frame: pd.DataFrame, columns: Sequence[str], suffix: str = "") -> pd.Series:
    """What tells a row from its baseline, e.g. 'bf16', 'eager', 'ddp ×2', 'box-a'."""
    def shown(column: str, value: Any) -> str:
        if column == "compile" and value in ("none", ""):
            return "eager"
        return f"×{value}" if column == "n_devices" else str(value)
    values = [frame[f"{column}{suffix}" if f"{column}{suffix}" in frame else column] for column in columns]
    return pd.Series([" ".join(shown(column, value) for column, value in zip(columns, row)) for row in zip(*values)],
                     index=frame.index, dtype=object)


def _same_environment(pairs: pd.DataFrame) -> pd.Series:
    same = pd.Series(True, index=pairs.index)
    for column in ENVIRONMENT:
        if column in pairs and f"{column}_base" in pairs:
            mine, theirs = pairs[column], pairs[f"{column}_base"]
            equal = (mine.astype(object) == theirs.astype(object)).fillna(False).astype(bool)
            same &= equal | (mine.isna() & theirs.isna())  # unknown on both sides is no change
    return same


def speedup(frame: pd.DataFrame, current: pd.DataFrame, baseline: Mapping[str, Any],
            free: Sequence[str] = ()) -> pd.DataFrame:
    """Every usable row of `current` (the latest of `frame`: `ReportFrame.latest`) with its baseline
    row: `speedup` where the pair may be made, else `no_ratio` saying why; `pairing` says how it
    was made; the noise verdict beside it. Both frames carry the comparability flags.

    `free` names identity columns that may also differ from the baseline row (comparing a
    strategy with `single` also frees `n_devices`). The baseline rows themselves are left out.

    Across machines (`machine` in the baseline): the latest rows, both `comparable`. Within a
    machine (rule C5): the baseline row of the target's own run; failing that, the latest one
    of another run in the same environment ("across runs"); never one of another environment.
    Both rows must be `pairable` (never contended, starved, bimodal or above a peak); an
    emulated one pairs only within its machine, labelled "emulation". A row whose baseline case
    exists but gives no pair is kept, with `speedup` NaN and the reason in `no_ratio`.
    """
    across_machines = "machine" in baseline
    differing = [*baseline, *free]
    keys = [c for c in IDENTITY if c not in baseline and c not in free]
    targets = usable(current[~matches(current, baseline)])
    pool = current if across_machines else frame
    bases = pool[matches(pool, baseline)]
    taken = list(dict.fromkeys([*BASE_COLUMNS, *PAIR_COLUMNS, *(c for c in ENVIRONMENT if c in bases)]))
    flag = "comparable" if across_machines else "pairable"
    # Candidate pairs are many per target (every run's baseline row): they are ranked on the
    # columns that decide, and the target's other columns joined to the kept pair only, so a
    # fleet's pairs never hold a copy of every column per candidate.
    deciding = list(dict.fromkeys([*keys, *differing, *TARGET_COLUMNS, flag,
                                   *(c for c in ENVIRONMENT if c in targets)]))
    pairs = targets[deciding].reset_index(names="target").merge(
        bases[taken].rename(columns=lambda c: f"{c}_base").rename(columns={f"{k}_base": k for k in keys}), on=keys)
    differs = pd.Series(False, index=pairs.index)
    for column in differing:
        differs |= pairs[column].astype(str).ne(pairs[f"{column}_base"].astype(str))
    pairs = pairs[differs]
    base_ok = pairs[f"{flag}_base"].astype(bool)
    same_run = pairs["run_id"].eq(pairs["run_id_base"])
    same_env = _same_environment(pairs)
    if across_machines:
        rank = np.where(base_ok, 0, 2)
    else:
        rank = np.select([same_run & base_ok, same_env & base_ok, same_run, same_env], [0, 1, 2, 3], 4)
    pairs = (pairs.assign(rank=rank).sort_values(["rank", "timestamp_base"], ascending=[True, False], kind="stable")
             .drop_duplicates(subset=["target", "case_id_base"], keep="first")
             .sort_values(["target", "case_id_base"]).reset_index(drop=True))
    target_ok = pairs[flag].astype(bool)
    paired = target_ok & pairs["rank"].le(1)
    pairs["speedup"] = (pairs["throughput"] / positive(pairs["throughput_base"])).where(paired)
    kind = ACROSS_MACHINES if across_machines else pd.Series(np.where(pairs["rank"].eq(0), SAME_RUN, ACROSS_RUNS),
                                                              index=pairs.index)
    emulated = (pairs["emulated"].astype("boolean").fillna(False)
                | pairs["emulated_base"].astype("boolean").fillna(False))
    pairs["pairing"] = (kind + emulated.map({True: f" · {EMULATION}", False: ""})).where(paired, "")
    pairs["no_ratio"] = _no_ratio(pairs, differing, target_ok)
    judged = noise_columns(pairs[paired.to_numpy()]).reindex(pairs.index)
    judged["beyond_noise"] = judged["beyond_noise"].astype("boolean").fillna(False).astype(bool)
    judged["noise_test"] = judged["noise_test"].fillna(NO_WORK)
    rest = targets.drop(columns=[c for c in pairs if c in targets]).loc[pairs["target"]].reset_index(drop=True)
    return pd.concat([pairs.drop(columns=["target", "rank"]), judged, rest], axis=1)


def _no_ratio(pairs: pd.DataFrame, differing: Sequence[str], target_ok: pd.Series) -> pd.Series:
    """Why a pair gives no ratio ('' where it gives one): the target row's reason, else the
    baseline row's, else that the only baseline is from another environment."""
    target, base = _side_label(pairs, differing), _side_label(pairs, differing, "_base")
    texts = []
    for i, ok, rank in zip(pairs.index, target_ok, pairs["rank"]):
        if not ok:
            texts.append(f"no ratio: the {target[i]} row "
                         f"{sentence(pairs.at[i, 'why_not'], pairs.at[i, 'why_not_text'])}")
        elif rank in (2, 3):
            run = f" (run {pairs.at[i, 'run_id_base']})" if rank == 3 else ""
            texts.append(f"no ratio: the {base[i]} row{run} "
                         f"{sentence(pairs.at[i, 'why_not_base'], pairs.at[i, 'why_not_text_base'])}")
        elif rank == 4:
            also = ("" if pairs.at[i, "pairable_base"] else
                    f"; that row also {sentence(pairs.at[i, 'why_not_base'], pairs.at[i, 'why_not_text_base'])}")
            texts.append(f"no ratio: the only {base[i]} row is from another environment (run "
                         f"{pairs.at[i, 'run_id_base']}), and runs of two environments are not paired{also}")
        elif pd.isna(pairs.at[i, "speedup"]):  # the baseline does no work per step
            texts.append(f"no ratio: the {base[i]} row does no work per step")
        else:
            texts.append("")
    return pd.Series(texts, index=pairs.index, dtype=object)


def describe(baseline: Mapping[str, Any]) -> str:
    return ", ".join(f"{column}={value}" for column, value in baseline.items())
