"""Arithmetic intensity and the roofline bound of kernel cases; the report's roofline charts and
energy columns (on fixture rows with chosen figures, so the expected values are exact)."""
from __future__ import annotations

import re

import pytest

from suites.cases.case import Case
from suites.records.metric_registry import METRICS, Work
from suites.strategies.jobs import case_work
from suites.report.render.tables import whole
from suites.report.render.html import render
from suites.report.analyses.prices import PriceTable
from suites.report.content import build_content
from suites.report.sections import problems, roofline
from suites.report.sections.base import ReportOptions
from tests.test_report_analysis import frame_of, matmul, options, row, table

XSS = "<b>box</b>"


def test_arithmetic_intensity_counts_each_operand_once_in_the_cases_dtype():
    square = case_work(Case.make("matmul", "torch", "cpu", params={"m": 1024, "n": 1024, "k": 1024}))
    assert square["min_bytes_per_step"] == 3 * 1024 * 1024 * 4
    half = case_work(Case.make("matmul", "torch", "cpu", precision="bf16", params={"m": 1024, "n": 1024, "k": 1024}))
    assert half["min_bytes_per_step"] == 3 * 1024 * 1024 * 2
    conv = case_work(Case.make("conv2d", "tf", "cpu", params={"batch": 2, "h": 8, "w": 8, "cin": 4, "cout": 6,
                                                              "kernel": 3, "stride": 2}))
    assert conv["min_bytes_per_step"] == (2 * 8 * 8 * 4 + 3 * 3 * 4 * 6 + 2 * 4 * 4 * 6) * 4
    work = Work(median_s=1.0, **{k: v for k, v in square.items() if v is not None})
    assert METRICS["arithmetic_intensity"].value(work) == pytest.approx(2 * 1024**3 / (12 * 1024**2))


@pytest.mark.parametrize("intensity_bytes, expected_bound", [
    (1e9, 0.02),  # 2 FLOP/byte x 10 GB/s = 0.02 TFLOP/s: memory-bound
    (1e6, 1.0),   # 2000 FLOP/byte x 10 GB/s = 20 TFLOP/s > peak 1: compute-bound
])
def test_the_bound_is_the_lower_of_peak_and_intensity_times_bandwidth(intensity_bytes, expected_bound):
    work = Work(median_s=0.5, n_devices=1, flops_per_step=2e9, min_bytes_per_step=intensity_bytes,
                roof_peak_tflops=1.0, roof_bandwidth_gbs=10.0)
    assert METRICS["roofline_bound_tflops"].value(work) == pytest.approx(expected_bound)
    assert METRICS["roofline_fraction"].value(work) == pytest.approx(4e-3 / expected_bound)  # 4 GFLOP/s achieved
    assert METRICS["roofline_fraction"].value(Work(median_s=0.5, n_devices=1, flops_per_step=2e9,
                                                   min_bytes_per_step=intensity_bytes)) is None  # no roof: absent


def kernel_row(precision: str, median: float, machine: str, **extra) -> dict:
    case = matmul(precision=precision)
    work = case_work(case)
    flops, moved = work["flops_per_step"], work["min_bytes_per_step"]
    tflops = flops / median / 1e12
    bound = min(0.5, flops / moved * 20.0 / 1000)
    return row(case, median, machine, device_name="Some CPU", tflops=tflops, roof_peak_tflops=0.5,
               roof_bandwidth_gbs=20.0, roofline_bound_tflops=bound, roofline_fraction=tflops / bound, **extra)


def test_one_roofline_chart_per_device_with_the_achieved_fractions():
    frame = table(kernel_row("fp32", 1e-4, XSS), kernel_row("bf16", 2e-4, XSS), kernel_row("fp32", 5e-5, "other"))
    section = roofline.build(frame_of(frame), options())
    assert len(section.figures) == 2  # two machines' CPUs
    assert all(alt.startswith("roofline of ") for _, alt in section.figures)
    (rows,) = [t.rows for t in section.tables]
    text = " ".join(cell.text for r in rows for cell in r)
    intensity = 2 * 64**3 / (3 * 64 * 64 * 4)  # 10.67 FLOP/byte: left of the ridge (25 FLOP/byte)
    fraction = 2 * 64**3 / 1e-4 / 1e12 / (intensity * 20 / 1000)
    assert f"{100 * fraction:.1f}%" in text and "memory" in text


def test_a_kernel_without_a_roof_is_counted_not_drawn():
    frame = table(row(matmul(), 1e-4, "a", tflops=0.005))
    section = roofline.build(frame_of(frame), options())
    assert section.figures == [] and any("have no roof" in line for line in section.text)


def test_energy_columns_beside_cost_and_why_a_row_has_none():
    conv = Case.make("conv2d", "torch", "cpu", params={"batch": 8, "h": 8, "w": 8, "cin": 4, "cout": 4})
    measured = row(conv, 0.01, "gpu-box", energy_j_per_step=2.0, energy_watts=200.0, samples_per_joule=4.0)
    unread = row(conv, 0.02, XSS, energy_reason="no CPU energy counter: /sys/class/powercap does not exist")
    frame = table(measured, unread)
    assert frame.set_index("machine").loc["gpu-box", "throughput_per_watt"] == pytest.approx(800 / 200)
    (section,) = problems.build(frame_of(frame, PriceTable.load()), options(PriceTable.load()))
    headers = whole(section.tables[0]).headers
    assert {"energy / step", "power", "samples/J", "samples/s per W", "cost (USD)"} <= set(headers)
    assert any("Energy not measured for 1 of 2 rows" in line and "powercap does not exist" in line
               for line in section.text)
    content = build_content(frame, ReportOptions(PriceTable.load()))
    html = render(content, "t", 1, [])
    assert XSS not in html and "&lt;b&gt;box&lt;/b&gt;" in html
    assert re.search(r"2(\.0+)? J", html) and "most per watt" in html
