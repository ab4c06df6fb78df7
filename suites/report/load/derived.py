"""Figures the tidy table derives from each row: missing metrics and the comparable throughput.

For asv and pytest-benchmark rows, the registry's metrics of the median step (samples/s, TFLOP/s,
all-reduce bandwidths, the analytic training-state estimates and a pipeline's bubble:
`Metric.from_median_step`) are computed here from the row's median step time and the case's
analytic work (`Job.work`, as at run time: given by the caller as `work_of`), with the
registry's own functions,
replacing what the source stored where the work is known: asv's track_* benchmarks time the
case again, separately, so their figures disagree with the step time and samples of the row.
The % of peak columns are rescaled with TFLOP/s. parbench's own rows derive every metric from
the stored measurement already and are kept as stored. `throughput` is the one figure every
comparison uses, so that a ratio always means "how much more work per second"; it comes from
the median step, as do the significance tests on raw samples. `sustained_throughput` is the same
figure at steps timed / seconds timed — what a long run sustains on a machine whose slow blocks
the median ignores — and is what costs are computed from. `memory_fits` says whether a row's
measured peak memory fits its device (`memory_fit`).
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import pandas as pd

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.records.metric_registry import METRICS, Work, roof_of_one_device
from suites.records.metrics import CASE_WORK

#: (column, unit) in the order `throughput` picks the first one a row has.
THROUGHPUT_SOURCES = (("samples_per_s", "samples/s"), ("tflops", "TFLOP/s"), ("busbw_gbs", "GB/s (busbw)"))
STEPS_UNIT = "steps/s"


#: A case's analytic work of one step, keyed by `CASE_WORK` (`suites.strategies.jobs.case_work`);
#: raises KeyError or ValueError where this process cannot know it.
WorkOf = Callable[[Case], Mapping[str, float | None]]


def _work_per_step(case_id: str, work_of: WorkOf | None) -> tuple[float, ...]:
    """The case's work (`work_of`), in `CASE_WORK` order; NaN where the case has none, or where
    it is not known: no `work_of` given, or a workload, model or strategy (a user's plugin) not
    registered here. Results stay data: reading them never needs the code that produced them."""
    if work_of is None:
        return (np.nan,) * len(CASE_WORK)
    try:
        counts = work_of(Case.from_id(case_id))
    except (KeyError, ValueError):
        return (np.nan,) * len(CASE_WORK)
    return tuple(np.nan if counts[name] is None else counts[name] for name in CASE_WORK)


def _known(value: float) -> float | None:
    return None if pd.isna(value) else float(value)


def _from_median_step(frame: pd.DataFrame, per_row: pd.DataFrame) -> dict[str, pd.Series]:
    """Each median-step metric of the registry for every row; NaN where it does not apply or the
    row has no step time."""
    emulated = frame["emulated"].fillna(False).astype(bool)
    works = [Work(median_s=t, n_devices=None if pd.isna(n) else int(n), emulated=bool(shared),
                  **{name: _known(value) for name, value in zip(CASE_WORK, counts)})
             for t, n, shared, *counts in zip(frame["median_s"], frame["n_devices"], emulated,
                                              *(per_row[name] for name in CASE_WORK))]
    return {name: pd.Series([metric.value(work) if work.median_s > 0 else None for work in works],
                            index=frame.index, dtype="float64")
            for name, metric in METRICS.items() if metric.from_median_step}


def fill_metrics(frame: pd.DataFrame, work_of: WorkOf | None = None) -> pd.DataFrame:
    """Fill metrics a source did not store, from the case's work (`work_of`; without it, only
    what needs no work) and the median step time."""
    frame = frame.copy(deep=False)
    case_ids = frame["case_id"].unique()
    counts = pd.DataFrame([_work_per_step(case_id, work_of) for case_id in case_ids], index=case_ids,
                          columns=list(CASE_WORK), dtype="float64")
    per_row = counts.reindex(frame["case_id"]).set_axis(frame.index)
    own = frame["source"].eq("parbench")
    # A stored figure wins for parbench's rows and where the work is unknown here.
    filled = {name: frame[name].where(own | derived.isna(), derived).fillna(derived)
              for name, derived in _from_median_step(frame, per_row).items()}
    rescale = (filled["tflops"] / frame["tflops"]).where(frame["tflops"].gt(0), 1.0)
    frame["pct_peak_table"] *= rescale
    frame["pct_peak_measured"] *= rescale
    frame["roofline_fraction"] *= rescale
    for name, column in filled.items():
        frame[name] = column
    frame = roofline_of_physical_devices(frame)
    frame["noisy"] = frame["noisy"].where(frame["source"] == "parbench",
                                          frame["iqr_s"] / frame["median_s"] > TimingConfig.target_rel_iqr)
    frame["noisy"] = frame["noisy"].fillna(False).astype("boolean")
    return memory_fit(frame)


def roofline_of_physical_devices(frame: pd.DataFrame) -> pd.DataFrame:
    """The roofline bound and the share of it reached, from each row's one-device roof (peak and
    bandwidth) times its physical devices: n_devices, 1 where emulated. Records written before
    emulated rows were given one device's roof stored n_devices x it; this puts them right."""
    frame = frame.copy(deep=False)
    roofed = frame[["arithmetic_intensity", "roof_peak_tflops", "roof_bandwidth_gbs", "n_devices"]].notna().all(axis=1)
    if not roofed.any():
        return frame
    rows = frame[roofed]
    physical = rows["n_devices"].where(~rows["emulated"].fillna(False).astype(bool), 1)
    bound = pd.Series([roof_of_one_device(*roof) for roof in zip(
        rows["arithmetic_intensity"], rows["roof_peak_tflops"], rows["roof_bandwidth_gbs"])],
        index=rows.index, dtype="float64") * physical
    frame.loc[roofed, "roofline_bound_tflops"] = bound
    frame.loc[roofed, "roofline_fraction"] = rows["tflops"] / bound
    return frame


def memory_fit(frame: pd.DataFrame) -> pd.DataFrame:
    """`memory_fits`: GPU rows, the largest peak reserved (else allocated) of one GPU against one
    GPU's memory; CPU rows, every rank process's peak together against the machine's RAM (they
    share it). NA where the row has no peak (older records, asv, pytest-benchmark) or the
    device's memory is unknown. The CUDA context is in no peak: a GPU row that fits by less
    than ~0.5 GiB may still not."""
    frame = frame.copy(deep=False)
    cpu = frame["device"].eq("cpu")
    frame["device_memory_gib"] = frame["device_memory_gib"].where(~cpu | frame["device_memory_gib"].notna(),
                                                                  frame["memory_gib"])
    per_gpu = frame[["peak_reserved_bytes", "peak_memory_bytes"]].max(axis=1)
    needed = pd.Series(np.where(cpu, frame["peak_memory_total_bytes"],
                                np.where(frame["device"].eq("gpu"), per_gpu, np.nan)), index=frame.index)
    known = needed.notna() & frame["device_memory_gib"].notna()
    frame["memory_fits"] = (needed <= frame["device_memory_gib"] * 2**30).astype("boolean").where(known, pd.NA)
    return frame


def add_throughput(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy(deep=False)
    frame["throughput"] = np.nan
    frame["throughput_unit"] = ""
    for column, unit in THROUGHPUT_SOURCES:
        take = frame["throughput"].isna() & frame[column].notna()
        frame.loc[take, "throughput"] = frame.loc[take, column]
        frame.loc[take, "throughput_unit"] = unit
    steps = frame["throughput"].isna() & frame["median_s"].gt(0)
    frame.loc[steps, "throughput"] = 1.0 / frame.loc[steps, "median_s"]
    frame.loc[steps, "throughput_unit"] = STEPS_UNIT
    spanned = frame["sustained_step_s"].gt(0) & frame["throughput"].notna()
    frame["sustained_throughput"] = (frame["throughput"] * frame["median_s"]
                                     / frame["sustained_step_s"]).where(spanned, frame["throughput"])
    frame["sustained_basis"] = np.where(spanned, "timed span", np.where(frame["throughput"].notna(), "median", ""))
    frame["throughput_per_watt"] = frame["throughput"] / frame["energy_watts"].where(frame["energy_watts"].gt(0))
    return frame
