"""A machine is its hardware: records of one hardware identity are one machine whatever their labels,
and a case measured in several runs of it swings between them (report-guide C6).

- `one_machine_per_hardware`: rows whose `hardware_id` (recorded: the GPUs' UUIDs, else the host's
  name, CPU, cores, RAM and every GPU's name, memory, power limit and MIG mode) is one are one
  machine: `machine` becomes the label it was first recorded under, `label` keeps each row's own.
  Rows without an identity (asv, pytest-benchmark) keep their label as their machine.
- `add_run_swing`: on each current row, how many runs of the same case on the same machine have a
  usable figure (`runs`) and the swing between them (`run_swing`: highest / lowest throughput).
  A ratio inside one machine that is smaller than the swing of its sides between runs is no
  finding (`no_finding`): a 1.05× within one run beside a 1.22× swing of one side between runs says
  nothing about the precision (or strategy) it compares.
"""
from __future__ import annotations

import pandas as pd

from suites.report.analyses.selection import usable


def one_machine_per_hardware(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `machine` one per hardware identity and `label` the label each row was recorded
    under (see the module)."""
    frame = frame.copy(deep=False)
    frame["label"] = frame["machine"]
    if "hardware_id" not in frame or frame.empty:
        return frame
    identity = frame["hardware_id"].fillna("").astype(str)
    known = identity.ne("")
    if not known.any():
        return frame
    first = (frame.loc[known, ["timestamp", "machine"]].assign(identity=identity[known])
             .sort_values(["timestamp", "machine"], kind="stable", na_position="last")
             .drop_duplicates("identity").set_index("identity")["machine"])
    frame["machine"] = frame["machine"].where(~known, identity.map(first))
    return frame


def pooled_labels(frame: pd.DataFrame) -> dict[str, list[str]]:
    """machine -> its labels, for each machine recorded under more than one label."""
    if "label" not in frame:
        return {}
    labels = frame.groupby("machine")["label"].unique()
    return {machine: sorted(map(str, names)) for machine, names in labels.items() if len(names) > 1}


def add_run_swing(current: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """`current` (a machine's latest rows) with `runs` and `run_swing` from every usable row of
    `records` of the same machine and case (see the module)."""
    current = current.copy(deep=False)
    measured = {"status", "throughput", "check_passed", "run_id"} <= set(records.columns)
    figures = usable(records) if measured else records.iloc[:0]  # a table of no measurements: no runs
    if figures.empty:
        current["runs"], current["run_swing"] = 0, 1.0
        return current
    per_run = figures.groupby(["machine", "case_id", "run_id"], sort=False)["throughput"].median()
    spread = per_run.groupby(level=["machine", "case_id"]).agg(["size", "min", "max"])
    keys = pd.MultiIndex.from_frame(current[["machine", "case_id"]])
    found = spread.reindex(keys)
    current["runs"] = found["size"].fillna(0).astype(int).to_numpy()
    current["run_swing"] = (found["max"] / found["min"]).where(found["min"].gt(0)).fillna(1.0).to_numpy()
    return current


def no_finding(ratio: float, *swings: float) -> bool:
    """A within-machine `ratio` no larger than the largest swing of its sides between runs."""
    widest = max((swing for swing in swings if swing == swing), default=1.0)  # NaN: no swing known
    return widest > 1.0 and max(ratio, 1.0 / ratio) <= widest
