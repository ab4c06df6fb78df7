"""One registry of derived metrics: the run, the report's recomputation, the tidy table and the
report's Method section all read the same definitions, so they cannot drift apart."""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suites.cases.case import Case
from suites.records.measurement import Measurement
from suites.records.metric_registry import METRICS, TIDY_METRICS, Work
from suites.records.metrics import derive
from suites.hardware.peaks import PeakTable
from suites.strategies.jobs import case_work, job_for
from suites.report.load.columns import COLUMNS, FLOAT_COLUMNS, case_fields, tidy
from suites.report.load.derived import add_throughput, fill_metrics
from suites.report.render.html import render
from suites.report.analyses.prices import PriceTable
from suites.report.content import build_content
from suites.report.sections.base import ReportOptions

MEDIAN_S = 0.002
#: Block times spread around MEDIAN_S; their median is MEDIAN_S exactly.
SAMPLES = tuple(MEDIAN_S * (1 + 0.01 * np.linspace(-1, 1, 9)))
MATMUL = Case.make("matmul", "torch", "cpu", params={"m": 64, "n": 32, "k": 16})
TRAIN = Case.make("train_step", "torch", "cpu", params={"model": "mlp", "batch": 64})
ALLREDUCE = Case.make("allreduce", "torch", "cpu", strategy="ddp", n_devices=4, params={"bytes": 1 << 20})


def run_time(case: Case, results_dir: Path) -> dict[str, float | None]:
    return derive(case, Measurement(samples=SAMPLES), results_dir, "box", PeakTable.load(), case_work(case),
                  job_for(case).emulated)


def pytest_benchmark_row(case: Case) -> dict:
    """A loaded pytest-benchmark result that stored no metrics, timed at MEDIAN_S."""
    return {"source": "pytest-benchmark", "machine": "box", **case_fields(case), "status": "ok",
            "run_id": "r", "timestamp": "2025-01-01T00:00:00+00:00", "median_s": MEDIAN_S,
            "samples_s": SAMPLES, "iqr_s": 0.0, "n": len(SAMPLES)}


def report_time(case: Case) -> pd.Series:
    return fill_metrics(tidy([pytest_benchmark_row(case)]), case_work).iloc[0]


def test_every_metric_has_a_unit_a_formula_and_a_meaning():
    for metric in METRICS.values():
        assert metric.unit.strip() and metric.formula.strip() and metric.description.strip(), metric.name


def test_every_tidy_metric_is_a_float_column_with_the_registry_meaning():
    assert TIDY_METRICS
    for name in TIDY_METRICS:
        assert COLUMNS[name] == METRICS[name].description
        assert name in FLOAT_COLUMNS
    # Kept out of the table: samples_per_s_sustained is there as sustained_step_s /
    # sustained_throughput; the compile metrics compare two rows (a compiled case and its eager
    # twin), so the report's compile section computes them (suites.report.analyses.compilation).
    assert set(METRICS) - set(TIDY_METRICS) == {"samples_per_s_sustained", "compile_speedup",
                                                "compile_break_even_steps"}


@pytest.mark.parametrize("case, expected", [
    (MATMUL, {"tflops": 2 * 64 * 32 * 16 / MEDIAN_S / 1e12}),
    (TRAIN, {"samples_per_s": 64 / MEDIAN_S}),
    (ALLREDUCE, {"algbw_gbs": (1 << 20) / MEDIAN_S / 1e9,
                 "busbw_gbs": (1 << 20) / MEDIAN_S / 1e9 * 2 * 3 / 4}),
], ids=["matmul", "train_step", "allreduce-4"])
def test_run_and_report_derive_the_same_metrics_from_the_same_median(case, expected, tmp_path):
    stored = run_time(case, tmp_path)
    row = report_time(case)
    for name, value in expected.items():
        assert stored[name] == pytest.approx(value)
    from_median = [name for name, metric in METRICS.items() if metric.from_median_step]
    assert {"tflops", "samples_per_s", "algbw_gbs", "busbw_gbs"} <= set(from_median)
    for name in from_median:
        if name in stored:
            assert row[name] == pytest.approx(stored[name]), name
        else:
            assert pd.isna(row[name]), f"{name}: the report made up a metric the run does not have"


def test_a_metric_without_its_inputs_is_left_out_but_an_unknown_peak_is_kept_as_none(tmp_path):
    stored = run_time(ALLREDUCE, tmp_path)
    assert "tflops" not in stored and "samples_per_s" not in stored
    work = Work(median_s=MEDIAN_S, n_devices=2, flops_per_step=1e9)
    assert METRICS["pct_peak_table"].applies(work)
    assert METRICS["pct_peak_table"].value(work) is None
    assert METRICS["pct_peak_table"].value(Work(median_s=MEDIAN_S, n_devices=2, flops_per_step=1e9,
                                                peak_table_tflops=0.5)) == pytest.approx(100 * 0.5 / (0.5 * 2))
    assert METRICS["busbw_gbs"].value(Work(median_s=1.0, n_devices=1, bytes_per_step=1e9)) == 0.0


def test_the_method_section_lists_every_metric_with_its_unit_and_formula():
    frame = add_throughput(fill_metrics(tidy([pytest_benchmark_row(case) for case in (MATMUL, TRAIN, ALLREDUCE)]),
                                        case_work))
    content = build_content(frame, ReportOptions(prices=PriceTable.load()))
    page = html.unescape(render(content, "metrics", files=1, warnings=[]))
    method = page[page.index("Method and formulas"):]
    for metric in METRICS.values():
        assert f"{metric.name} [{metric.unit}]" in method
        assert metric.formula in method
