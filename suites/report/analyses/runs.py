"""Two runs or machines side by side, case by case: what `parbench compare A B` prints.

A and B are each a results path, or a machine label or run id (or its unique prefix) within
a results folder. Rows pair by case id; ratio = throughput(B) / throughput(A), so > 1 means B
is faster; `verdict` is "B faster"/"B slower" only beyond noise, else "same". A regression is
a case B runs slower than A by more than a threshold *and* beyond
noise in one test (suites.report.analyses.noise.slower_beyond), or a case that was ok in A and failed in B.
A gate fails when one side holds no records or the sides share no case: it judged nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from suites.errors import UserError
from suites.report.analyses.comparison import NO_WORK, noise_columns
from suites.report.load.derived import WorkOf
from suites.report.load.files import load_results
from suites.report.analyses.noise import why_not_slower_beyond

#: Flags of B's and A's record that make their spread untrustworthy: a noisy spread, or other work
#: competing for the CPU while the case ran (interference only adds time, so it can fake a regression).
NOISE_FLAGS = ("noisy", "noisy_base", "contended", "contended_base", "starved", "starved_base",
               "bimodal", "bimodal_base")
SIDE_COLUMNS = ["machine", "run_id", "status", "reason", "throughput", "throughput_unit", "median_s", "iqr_s",
                "q1_s", "q3_s", "samples_s", "noisy", "contended", "starved", "bimodal", "emulated", "check_passed",
                "timestamp"]
#: `verdict` of a pair one of whose rows does no work per step (a one-rank all-reduce: busbw 0).
NO_WORK_VERDICT = "n/a (no work per step)"


@dataclass(frozen=True)
class Side:
    frame: pd.DataFrame
    description: str


def select(spec: str, results: Path, loaded: dict[Path, pd.DataFrame], work_of: WorkOf | None = None) -> Side:
    """`spec` as a path, else a machine label, run id or run-id prefix within `results`
    (`work_of`: as `load_results` takes it)."""
    path = Path(spec)
    if path.exists():
        return Side(load_results([path], work_of), str(path))
    if results not in loaded:
        loaded[results] = load_results([results], work_of) if results.exists() else pd.DataFrame()
    frame = loaded[results]
    if frame.empty:
        raise UserError(f"{spec!r} is not a path, and there are no results in {results} to find it in")
    if frame["machine"].eq(spec).any():
        return Side(frame[frame["machine"].eq(spec)], f"machine {spec}")
    runs = frame["run_id"].unique()
    matching = [run for run in runs if run == spec] or [run for run in runs if run.startswith(spec)]
    if len(matching) == 1:
        return Side(frame[frame["run_id"].eq(matching[0])], f"run {matching[0]}")
    if len(matching) > 1:
        raise UserError(f"{spec!r} matches {len(matching)} runs ({', '.join(matching[:4])}, ...); give more of the id")
    recent = frame.sort_values("timestamp").drop_duplicates("run_id", keep="last")["run_id"].tail(5)
    raise UserError(f"{spec!r} is neither a path nor a machine label or run id in {results}; machines: "
                    f"{', '.join(sorted(frame['machine'].unique()))}; recent runs: {', '.join(recent)}")


def _latest_per_case(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("timestamp", kind="stable").drop_duplicates("case_id", keep="last")


def compare(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per case id in A or B: both sides' figures, `ratio`, the noise verdict, `verdict`."""
    a, b = (side.reindex(columns=list(dict.fromkeys([*side.columns, *SIDE_COLUMNS]))) for side in (a, b))
    left = (_latest_per_case(a)[["case_id", *SIDE_COLUMNS]].add_suffix("_base")
            .rename(columns={"case_id_base": "case_id"}))
    right = _latest_per_case(b)[["case_id", *SIDE_COLUMNS]]
    pairs = right.merge(left, on="case_id", how="outer", indicator="side").sort_values("case_id").reset_index(drop=True)
    both_ok = pairs["status"].eq("ok") & pairs["status_base"].eq("ok") & pairs["throughput"].notna() \
        & pairs["throughput_base"].notna()
    pairs["ratio"] = (pairs["throughput"] / pairs["throughput_base"]).where(both_ok)
    judged = noise_columns(pairs[both_ok])
    pairs = pairs.join(judged)
    pairs["beyond_noise"] = pairs["beyond_noise"].astype("boolean")
    pairs["verdict"] = verdicts(pairs, both_ok)
    return pairs


def verdicts(pairs: pd.DataFrame, both_ok: pd.Series) -> pd.Series:
    verdict = pd.Series("", index=pairs.index)
    verdict[pairs["side"].eq("left_only")] = "only in B"
    verdict[pairs["side"].eq("right_only")] = "only in A"
    paired = pairs["side"].eq("both")
    same = pairs["status"].eq(pairs["status_base"])
    verdict[paired & ~both_ok & same] = "both " + pairs["status"]
    verdict[paired & ~both_ok & ~same] = "A " + pairs["status_base"] + ", B " + pairs["status"]
    beyond = pairs["beyond_noise"].fillna(False).astype(bool)
    verdict[both_ok & beyond & pairs["ratio"].gt(1)] = "B faster"
    verdict[both_ok & beyond & pairs["ratio"].lt(1)] = "B slower"
    verdict[both_ok & ~beyond] = "same"
    no_work = pairs["noise_test"].eq(NO_WORK) if "noise_test" in pairs else pd.Series(False, index=pairs.index)
    verdict[both_ok & no_work.fillna(False).astype(bool)] = NO_WORK_VERDICT
    return verdict


def regression_notes(pairs: pd.DataFrame, threshold: float) -> pd.Series:
    """For each pair B runs slower beyond noise ("B slower"): '' where it is a regression (more
    than `threshold` slower beyond noise, `noise.slower_beyond`, on step times: a case does the
    same work on both sides), else why not, in words; '' for every other pair."""
    def why_not(row: pd.Series) -> str:
        noisy = any(_flag(row.get(column)) for column in NOISE_FLAGS)
        return why_not_slower_beyond(threshold, row["samples_s_base"], (row["q1_s_base"], row["q3_s_base"]),
                                     row["samples_s"], (row["q1_s"], row["q3_s"]), noisy)
    notes = pd.Series("", index=pairs.index, dtype=object)
    judged = pairs["verdict"].eq("B slower")
    if judged.any():
        notes[judged] = pairs[judged].apply(why_not, axis=1).astype(str)
    return notes


def regressions(pairs: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Cases B runs more than `threshold` (0.05 = 5%) slower beyond noise (`regression_notes`
    gives none against them), or that B failed and A ran."""
    regressed = pairs["verdict"].eq("B slower") & regression_notes(pairs, threshold).eq("")
    broke = pairs["status"].eq("failed") & pairs["status_base"].eq("ok")
    return pairs[regressed | broke]


def gate_problem(pairs: pd.DataFrame, a: str, b: str) -> str | None:
    """Why a regression gate over `pairs` would judge nothing (None when it judges something)."""
    common = pairs[pairs["side"].eq("both")]
    if common.empty:
        return (f"{a} and {b} have no case in common, so the gate judged nothing; compare results of "
                f"the same suite")
    broke = common["status_base"].eq("ok") & common["status"].eq("failed")
    if not (common["ratio"].notna() | broke).any():
        return (f"no case in common ran ok in both {a} and {b}, so the gate judged nothing; compare runs "
                f"whose cases ran")
    return None


def _flag(value: object) -> bool:
    return False if value is None or pd.isna(value) else bool(value)
