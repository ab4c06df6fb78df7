"""The page's content: the report's one `ReportFrame`, built once over the records, then the first
screen (`overview`), every section of `sections.SECTIONS` in order and the per-problem tables,
each reading that frame. Nothing here computes a figure or writes HTML."""
from __future__ import annotations

import pandas as pd

from suites.records.metric_registry import METRICS
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.noise import ALPHA, MIN_SAMPLES
from suites.report.overview import build_overview
from suites.report.render.page import ReportContent
from suites.report.sections import SECTIONS, problems
from suites.report.sections.base import ReportOptions

#: Formulas of the comparisons, shown in the report after the derived metrics' (`metric_formulas`).
REPORT_FORMULAS = {
    "throughput": "samples/s where the workload counts samples, else TFLOP/s, else all-reduce busbw, else steps/s; "
                  "from the median step time (speedups, rankings and noise tests use it)",
    "sustained": "throughput · median step / (seconds timed / steps timed): what a long run sustains, slow blocks "
                 "included; costs use it (= throughput where a source stored no timed span, e.g. asv)",
    "speedup": "throughput / throughput of the baseline row (same everything but the baseline's columns)",
    "scaling efficiency": "thr(N) / (N · thr(1)) from one run on one machine; weak scaling (per-device batch "
                          "fixed) unless the case declares scaling=strong (global batch fixed)",
    "relative performance": "geometric mean over problems of best throughput / the reference's best throughput, "
                            "per precision",
    "cost per M samples": "price per hour / 3600 / sustained samples/s · 1e6",
    "cost per PFLOP": "price per hour / 3600 · 1000 / sustained TFLOP/s",
    "per watt": "throughput / energy_watts (perf per watt: samples/s per W = samples per joule; TFLOP/s per W); "
                "beside the cost per unit of work (perf per dollar)",
    "memory fits": "GPU: the largest peak reserved (torch; TensorFlow reports none: allocated) of one GPU <= one GPU's "
                   "memory (nvidia-smi memory.total); CPU: the sum of the rank processes' peak resident sets <= the "
                   "machine's RAM. The CUDA context (a few hundred MiB) is in no peak.",
    "noise": f"Mann-Whitney U (two-sided, normal approximation, tie-corrected) on the raw samples when both sides "
             f"have ≥{MIN_SAMPLES}, beyond noise when p < {ALPHA}; otherwise beyond noise when the IQRs do not "
             f"overlap. Step times are compared per unit of work.",
}


def metric_formulas() -> dict[str, str]:
    """'name [unit]' -> formula of every derived metric, for the report's Method section."""
    return {f"{metric.name} [{metric.unit}]": metric.formula for metric in METRICS.values()}



def build_content(records: pd.DataFrame, options: ReportOptions) -> ReportContent:
    """The page's content over `records` (the tidy table as loaded)."""
    frame = ReportFrame.build(records, options.prices, options.definitions)
    current = frame.latest
    currency = options.prices.currency
    prices = f"prices: {', '.join(options.prices.sources)} ({currency}; edit suites/prices.toml or pass --prices FILE)"
    return ReportContent(
        sections=[section.build(frame, options) for section in SECTIONS],
        problems=problems.build(frame, options),
        counts={status: int((current["status"] == status).sum()) for status in ("ok", "unavailable", "failed")}
        | {"emulated": int(current["emulated"].fillna(False).sum()), "records": len(records),
           "not_comparable": len(frame.not_comparable),
           "superseded": len(records) - len(current)},
        machines=sorted(records["machine"].unique()),
        formulas={**metric_formulas(), **REPORT_FORMULAS},
        prices=prices,
        frame=frame.records,
        overview=build_overview(frame, options.reference, prices),
    )
