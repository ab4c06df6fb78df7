"""The report's first screen (suites/report/overview.py): device types against workload families,
the verdict, the strategy x precision grids, and the rules that keep them true (report-guide §3)."""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.report.render.html import render
from suites.report.analyses.device_types import BEST, device_type
from suites.report.analyses.prices import PriceTable
from suites.report.content import build_content
from suites.report.overview import build_overview, fmt_ratio
from suites.report.sections.base import ReportOptions
from tests.test_report_analysis import frame_of, matmul, row, table

NO_PRICES = PriceTable("USD", {}, (), None, ())
XEON, EPYC = {"cpu_model": "Xeon", "cores": 4}, {"cpu_model": "EPYC", "cores": 2}


def overview(frame, prices: PriceTable = NO_PRICES, reference: str | None = None):
    return build_overview(frame_of(frame, prices), reference, "prices: test")


def speed_cell(result, device: str, family: str, precision: str = "best") -> str:
    (grid,) = [grid for grid in result.matrices if grid.key == f"speed-p{_precision_index(result, precision)}"]
    column = grid.headers.index(family)
    (cells,) = [cells for cells in grid.rows if cells[0].text == device]
    return cells[column].text


def _precision_index(result, precision: str) -> int:
    labels = [label for _, label in result.precision_choices]
    return labels.index("best passing" if precision == BEST else precision)


def two_cpus(fast: dict | None = None, slow: dict | None = None):
    """Two device types on two problems: EPYC twice as fast as Xeon on both."""
    small = Case.make("matmul", "torch", "cpu", params={"m": 256, "n": 256, "k": 256})
    return table(row(matmul(), 2e-3, "xeon-box", **XEON), row(small, 2e-4, "xeon-box", **XEON),
                 row(matmul(), 1e-3, "epyc-box", **EPYC, **(fast or {})),
                 row(small, 1e-4, "epyc-box", **EPYC, **(slow or {})))


def test_a_device_type_is_the_cpu_model_and_cores_or_the_gpu_and_its_count():
    frame = table(row(matmul(), 1e-3, "a", **XEON),
                  row(matmul(device="gpu", n_devices=1), 1e-4, "b", device_name="NVIDIA H100 80GB HBM3"))
    assert list(device_type(frame)) == ["Xeon · 4 cores", "H100 80GB HBM3 ×1"]


def test_a_cell_is_the_ratio_to_the_reference_type_with_its_coverage():
    result = overview(two_cpus(), reference="xeon-box")
    assert result.reference == "Xeon · 4 cores"
    assert speed_cell(result, "EPYC · 2 cores", "matmul") == "2.00×, 2.00×"  # 2 problems: the single ratios
    assert speed_cell(result, "Xeon · 4 cores", "matmul") == "1.00×"
    assert any("matmul at equal precision, EPYC · 2 cores over the reference Xeon · 4 cores: 2.00× in fp32" in line
               for line in result.verdict)


@pytest.mark.parametrize("flag, why", [
    ({"contended": True, "contention": "others took 60% of its cores"}, "contended"),
    ({"bimodal": True}, "bimodal"),
    ({"pct_peak_table": 150.0}, "above the peak"),
])
def test_a_contended_bimodal_or_above_peak_row_is_in_no_cell(flag, why):
    """The flagged row is the faster one on paper: its problem leaves the cell, which keeps only the
    other problem's ratio, and the not-comparable line counts it."""
    result = overview(two_cpus(fast=flag), reference="xeon-box")
    assert speed_cell(result, "EPYC · 2 cores", "matmul") == "2.00×"  # one problem left, not two
    assert why in result.not_comparable


def test_with_every_row_of_a_type_flagged_there_is_no_matrix_and_the_page_says_why():
    contended = {"contended": True, "contention": "busy"}
    result = overview(two_cpus(fast=contended, slow=contended))
    assert not result.matrices and "One device type (Xeon · 4 cores)" in result.no_matrix
    assert "2 contended" in result.not_comparable


def test_an_emulated_row_is_in_no_cell():
    frame = two_cpus()
    frame.loc[frame["machine"].eq("epyc-box"), "emulated"] = True
    result = overview(frame)
    assert not result.matrices and "2 emulated" in result.not_comparable


def test_an_illustrative_price_crowns_nothing_and_a_sourced_one_does():
    frame = two_cpus()
    illustrative = PriceTable("USD", {}, (), 0.05, ("test",), cpu_source="illustrative: a guess")
    assert not any("Cheapest" in line for line in overview(frame, illustrative).verdict)
    sourced = PriceTable("USD", {"xeon-box": 1.0, "epyc-box": 4.0}, (), None, ("test",))
    (line,) = [line for line in overview(frame, sourced).verdict if line.startswith("Cheapest")]
    # EPYC is 2x as fast at 4x the price: Xeon does the work for half the cost
    assert "Xeon · 4 cores (2.00× cheaper than EPYC · 2 cores" in line


def test_one_price_for_every_type_gives_no_cheapest_crown():
    same = PriceTable("USD", {"xeon-box": 1.0, "epyc-box": 1.0}, (), None, ("test",))
    assert not any("Cheapest" in line for line in overview(two_cpus(), same).verdict)


def test_a_gpu_type_whose_records_lack_bound_by_says_its_limits_were_not_recorded():
    gpu = {"device_name": "NVIDIA H100 80GB HBM3", "bound_by": ""}
    frame = table(row(matmul(), 2e-3, "cpu-box", **XEON),
                  row(matmul(device="gpu"), 1e-5, "gpu-box", **gpu))
    result = overview(frame, reference="cpu-box")
    (line,) = result.verdict
    assert line.endswith("comparable rows only)*.")  # the caveat is said once, under the verdict
    assert result.verdict_note.startswith("* What limited H100 80GB HBM3 ×1 was not recorded")


# --- strategy x precision grids: pairs within a machine (C5, C11) ---------------------------------

def train_case(strategy: str = "single", n: int = 1, precision: str = "fp32") -> Case:
    return Case.make("train_step", "torch", "cpu", strategy=strategy, n_devices=n, precision=precision,
                     params={"model": "mlp", "batch": 64})


def grid_cell(frame, row_label: str, column: str) -> tuple[str, str]:
    (grid,) = overview(frame).strategy_grids
    (cells,) = [cells for cells in grid.rows if cells[0].text == row_label]
    cell = cells[grid.headers.index(column)]
    return cell.text, cell.title


def test_a_precision_speedup_pairs_rows_of_one_run_and_labels_another_runs():
    same = table(row(train_case(), 2e-3, run="r1"), row(train_case(precision="bf16"), 1e-3, run="r1"))
    assert grid_cell(same, "torch · single ×1", "bf16")[0] == "2.00×"
    across = table(row(train_case(), 2e-3, run="r1"), row(train_case(precision="bf16"), 1e-3, run="r2"))
    text, title = grid_cell(across, "torch · single ×1", "bf16")
    assert text == "2.00×†" and "across runs" in title


def test_a_contended_row_gives_no_speedup_and_says_why():
    frame = table(row(train_case(), 2e-3), row(train_case(precision="bf16"), 1e-3, contended=True,
                                                 contention="others took 60% of its cores"))
    text, title = grid_cell(frame, "torch · single ×1", "bf16")
    assert text == "–" and "contended" in title


def test_a_failed_check_reads_fail_and_a_one_device_ddp_is_overhead_only():
    frame = table(row(train_case(), 2e-3), row(train_case(precision="bf16"), 1e-3, check_passed=False),
                  row(train_case("ddp", 1), 2.1e-3))
    assert grid_cell(frame, "torch · single ×1", "bf16")[0] == "FAIL"
    text, title = grid_cell(frame, "torch · ddp ×1", "fp32")
    assert text == "1 device" and "overhead only" in title


def test_an_emulated_strategy_pairs_within_its_machine_labelled():
    frame = table(row(train_case(), 2e-3), row(train_case("ddp", 2), 1.5e-3, emulated=True))
    text, title = grid_cell(frame, "torch · ddp ×2", "fp32")
    assert text.endswith("emu") and "emulated" in title


def test_the_first_screen_escapes_text_from_the_records():
    label = "<script>alert(1)</script>"
    frame = table(row(matmul(), 2e-3, "a", cpu_model=label, cores=4), row(matmul(), 1e-3, "b", **EPYC))
    html = render(build_content(frame, ReportOptions(NO_PRICES)), "t", 1, [])
    assert label not in html and "&lt;script&gt;alert(1)&lt;/script&gt; · 4 cores" in html


def test_ratios_are_printed_with_the_digits_they_carry():
    assert [fmt_ratio(v) for v in (1.0, 0.33333, 12.345, 480.2, 0.0015, float("nan"))] == \
        ["1.00×", "0.33×", "12.3×", "480×", "0.0015×", "–"]


def test_the_reports_one_device_strategies_are_the_plugins():
    """The grids grey a one-device run of every strategy but these: the plugins decide which."""
    from suites.cases.vocabulary import Framework
    from suites.report.overview import ONE_DEVICE_STRATEGIES
    from suites.strategies.registry import find_plugin, strategies_of

    one_device = {str(strategy) for framework in Framework for strategy in strategies_of(framework)
                  if find_plugin(framework, strategy).rules.one_device}
    assert one_device == ONE_DEVICE_STRATEGIES
