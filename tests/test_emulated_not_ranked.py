"""Emulated rows never win a hardware ranking or a price comparison, always say "emulated", and
are held to one physical device's roof; a problem with one configuration ranks nothing.

The rows are fixtures with chosen step times (tests.test_report_analysis.row), not measurements.
"""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.records.metric_registry import METRICS, Work
from suites.report.analyses.choice import choices
from suites.report.load.columns import config_label
from suites.report.analyses.frame import ReportFrame
from suites.report.analyses.prices import PriceTable
from suites.report.analyses.relative import relative_performance
from suites.report.sections import problems, summary
from tests.test_report_analysis import frame_of, matmul, options, row, table, train

SMALL_DDP = Case.make("train_step", "torch", "cpu", strategy="ddp", n_devices=2,
                      params={"model": "mlp", "batch": 32, "scaling": "weak"})
PRICES = PriceTable("USD", {"real-a": 1.0, "real-b": 2.0, "vm": 0.01}, (), None, ("test",))


def mixed_frame() -> ReportFrame:
    """train_step batch 64: two real machines, and an emulated cpu×2 row on a cheap VM that is
    faster than both; matmul: one real configuration; train_step batch 32: only an emulated row."""
    return frame_of(table(
        row(train(1, "weak"), 2e-3, "real-a"), row(train(1, "weak"), 3e-3, "real-b"),
        row(train(2, "weak"), 1e-3, "vm", emulated=True),
        row(matmul(), 1e-3, "real-a"),
        row(SMALL_DDP, 1e-3, "vm", emulated=True)), PRICES)


def test_summary_ranks_real_hardware_only_and_names_the_emulated_rows():
    frame = mixed_frame()
    table = choices(frame.comparable).set_index("problem")
    for column in ("fastest", "runner_up", "cheapest"):
        assert not table[column].dropna().str.contains("vm").any(), column
    sentences = summary.build(frame, options(PRICES)).text
    text = " ".join(sentences)
    assert "real-a · cpu×1 · torch ddp fp32 is fastest" in text
    assert "vm · cpu×2 · torch ddp fp32 (emulated)" in text and "Not ranked on" in text
    assert "Not ranked on train_step batch=32" in text and "no real hardware ran this problem" in text
    assert not any("vm" in sentence and "fastest" in sentence for sentence in sentences)


def test_a_problem_with_one_configuration_gets_no_fastest_sentence():
    sentences = summary.build(mixed_frame(), options(PRICES)).text
    (matmul_sentence,) = [s for s in sentences if s.startswith("On matmul")]
    assert "fastest" not in matmul_sentence and "cheapest" not in matmul_sentence
    assert "only real-a · cpu×1 · torch single fp32 ran on real hardware" in matmul_sentence
    assert "nothing to rank it against" in matmul_sentence


def test_emulated_rows_say_so_in_every_label():
    frame = mixed_frame().records
    labels = config_label(frame)
    assert all(label.endswith(" (emulated)") == emulated for label, emulated in zip(labels, frame["emulated"]))


def roof_work(emulated: bool) -> Work:
    """A kernel on 2 devices at 0.1 TFLOP/s, AI 10 FLOP/byte, each device 0.2 TFLOP/s and 100 GB/s."""
    return Work(median_s=1.0, n_devices=2, emulated=emulated, flops_per_step=0.1e12, min_bytes_per_step=0.01e12,
                roof_peak_tflops=0.2, roof_bandwidth_gbs=100.0, peak_table_tflops=0.2, peak_measured_tflops=0.25)


def test_an_emulated_row_is_held_to_one_physical_devices_roof_and_peak():
    emulated, real = roof_work(emulated=True), roof_work(emulated=False)
    # one device allows min(0.2, 10 x 100 / 1000) = 0.2 TFLOP/s; two real devices twice that
    assert METRICS["roofline_bound_tflops"].value(emulated) == pytest.approx(0.2)
    assert METRICS["roofline_bound_tflops"].value(real) == pytest.approx(0.4)
    assert METRICS["roofline_fraction"].value(emulated) == pytest.approx(0.5)
    assert METRICS["roofline_fraction"].value(real) == pytest.approx(0.25)
    assert METRICS["pct_peak_table"].value(emulated) == pytest.approx(50.0)
    assert METRICS["pct_peak_table"].value(real) == pytest.approx(25.0)
    assert METRICS["pct_peak_measured"].value(emulated) == pytest.approx(40.0)


def test_the_report_puts_an_older_emulated_records_doubled_roof_right():
    """Records written before the fix stored n_devices x the one CPU's roof for emulated rows."""
    roof = {"arithmetic_intensity": 10.0, "roof_peak_tflops": 0.2, "roof_bandwidth_gbs": 100.0,
            "roofline_bound_tflops": 0.4, "roofline_fraction": 0.25}
    frame = table(row(train(2, "weak"), 1e-3, "vm", emulated=True, tflops=0.1, **roof),
                  row(train(2, "weak"), 1e-3, "gpus", device="gpu", tflops=0.1, **roof))
    by_machine = frame.set_index("machine")
    assert by_machine.loc["vm", "roofline_bound_tflops"] == pytest.approx(0.2)
    assert by_machine.loc["vm", "roofline_fraction"] == pytest.approx(0.5)
    assert by_machine.loc["gpus", "roofline_bound_tflops"] == pytest.approx(0.4)


def test_relative_performance_compares_real_hardware_only():
    summary_table, reference = relative_performance(mixed_frame(), None)
    assert not summary_table["hardware"].str.startswith("vm").any()
    assert reference == "real-a · cpu×1"


def test_per_problem_of_fastest_is_against_real_hardware():
    sections = {section.title: section for section in problems.build(mixed_frame(), options(PRICES))}
    (problem,) = [title for title in sections if title.startswith("train_step") and "batch=64" in title]
    result = sections[problem].tables[0]
    column, label = result.headers.index("of fastest"), result.headers.index("configuration")
    why = result.headers.index("flags / not comparable")
    of_fastest = {cells[label].text.split(" · ")[0]: cells[column].text for cells in result.rows}
    # the emulated row is 4x faster on paper (twice the samples in half the time), but a ratio of the
    # emulation against hardware is no true figure: none is drawn, and the row says why, after the ranked ones
    assert of_fastest["real-a"] == "1.00×" and of_fastest["vm"] == "–"
    assert [cells[label].text.split(" · ")[0] for cells in result.rows][-1] == "vm"
    assert result.rows[-1][why].text.startswith("emulated")
