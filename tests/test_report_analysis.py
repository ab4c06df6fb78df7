"""Pure analysis functions of the report on small synthetic tables.

These rows are test fixtures with chosen step times (so the expected ratios are exact), not
measurements; the end-to-end tests use real results.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import pytest

from suites.cases.case import Case
from suites.report.analyses.choice import choices
from suites.report.analyses.comparability import flag
from suites.report.load.columns import case_fields, tidy
from suites.report.analyses.comparison import parse_baseline, speedup
from suites.report.analyses.frame import ReportFrame
from suites.report.load.derived import add_throughput, fill_metrics
from suites.report.analyses.prices import PriceTable, add_costs
from suites.report.analyses.relative import relative_performance
from suites.report.analyses.runs import compare, regressions
from suites.report.analyses.scaling import scaling
from suites.report.analyses.selection import latest
from suites.report.sections.base import ReportOptions
from suites.strategies.jobs import case_work

MATMUL = {"m": 64, "n": 64, "k": 64}


def row(case: Case, median: float, machine: str = "a", run: str = "r1", spread: float = 0.01,
        status: str = "ok", time: str = "2025-01-01T00:00:00+00:00", cores: int = 4, **extra) -> dict:
    """A fixture row: 9 samples spread evenly ±spread around `median`."""
    samples = tuple(median * (1 + spread * np.linspace(-1, 1, 9))) if status == "ok" else ()
    q1, q3 = (np.percentile(samples, [25, 75]) if samples else (None, None))
    return {"source": "parbench", "machine": machine, **case_fields(case), "status": status, "run_id": run,
            "timestamp": time, "median_s": median if samples else None, "samples_s": samples, "q1_s": q1,
            "q3_s": q3, "iqr_s": (q3 - q1) if samples else None, "n": len(samples), "emulated": False,
            "cpu_cores": cores, "device_name": "", "check_passed": True if samples else None, **extra}


def table(*rows: dict) -> pd.DataFrame:
    return add_throughput(fill_metrics(tidy(rows), case_work))


#: No price for anything: for the tests that are not about cost.
NO_PRICES = PriceTable("USD", {}, (), None, ())


def frame_of(records: pd.DataFrame, prices: PriceTable = NO_PRICES) -> ReportFrame:
    """The report's frame over fixture records: flagged and priced once, as a report builds it."""
    return ReportFrame.build(records, prices)


def options(prices: PriceTable = NO_PRICES, **given) -> ReportOptions:
    return ReportOptions(prices=prices, **given)


def pairs_of(records: pd.DataFrame, baseline: dict[str, str], free: Sequence[str] = ()) -> pd.DataFrame:
    """`speedup` over fixture records, as the report's sections ask it."""
    frame = frame_of(records)
    return speedup(frame.records, frame.latest, baseline, free)


def matmul(**kw) -> Case:
    return Case.make("matmul", "torch", kw.pop("device", "cpu"), params=MATMUL, **kw)


def train(n: int, scaling_mode: str, **kw) -> Case:
    return Case.make("train_step", "torch", "cpu", strategy="ddp", n_devices=n,
                     params={"model": "mlp", "batch": 64, "scaling": scaling_mode}, **kw)


def test_speedup_against_a_machine_baseline_with_noise_verdict():
    frame = table(row(matmul(), 2e-3, "a"), row(matmul(), 1e-3, "b"), row(matmul(precision="bf16"), 1e-3, "a"),
                  row(matmul(precision="bf16"), 0.99e-3, "b", spread=0.2))
    pairs = pairs_of(frame, {"machine": "a"}).set_index("precision")
    assert pairs.loc["fp32", "speedup"] == pytest.approx(2.0)
    assert pairs.loc["fp32", "beyond_noise"] and "Mann-Whitney" in pairs.loc["fp32", "noise_test"]
    assert pairs.loc["bf16", "speedup"] == pytest.approx(1 / 0.99)
    assert not pairs.loc["bf16", "beyond_noise"]
    assert set(pairs["machine_base"]) == {"a"} and len(pairs) == 2


def test_precision_speedup_pairs_only_within_a_machine():
    frame = table(row(matmul(), 4e-3, "a"), row(matmul(precision="bf16"), 1e-3, "a"), row(matmul(), 1e-3, "b"))
    pairs = pairs_of(frame, {"precision": "fp32"})
    assert len(pairs) == 1 and pairs.loc[0, "machine"] == "a" and pairs.loc[0, "speedup"] == pytest.approx(4.0)


def test_strategy_baseline_frees_the_device_count_and_compares_work_per_second():
    single = Case.make("train_step", "torch", "cpu", params={"model": "mlp", "batch": 64, "scaling": "weak"})
    frame = table(row(single, 1e-3), row(train(2, "weak"), 1e-3))
    pairs = pairs_of(frame, {"strategy": "single"}, free=["n_devices"])
    # same step time, twice the global batch under weak scaling: twice the samples per second
    assert pairs.loc[0, "speedup"] == pytest.approx(2.0)


def test_failed_rows_never_win_a_comparison():
    frame = table(row(matmul(), 1e-3, "a"), row(matmul(), 1e-4, "b", status="failed", reason="wrong result"))
    assert pairs_of(frame, {"machine": "a"}).empty


def test_parse_baseline_rejects_unknown_columns():
    assert parse_baseline(["device=cpu", "n_devices=1"]) == {"device": "cpu", "n_devices": "1"}
    with pytest.raises(ValueError, match="COLUMN=VALUE"):
        parse_baseline(["colour=blue"])


@pytest.mark.parametrize("mode, expected", [("weak", [1.0, 0.8, 0.5]), ("strong", [1.0, 0.4, 0.125])])
def test_scaling_efficiency_is_throughput_based_weak_and_strong(mode, expected):
    # step times: T(1) = 1 ms, T(2) = 1.25 ms, T(4) = 2 ms
    frame = table(*(row(train(n, mode), t) for n, t in ((1, 1e-3), (2, 1.25e-3), (4, 2e-3))))
    curves = scaling(flag(frame))
    assert list(curves["n_devices"]) == [1, 2, 4]
    assert list(curves["efficiency"]) == pytest.approx(expected)
    assert set(curves["scaling"]) == {mode}


def test_scaling_uses_one_run_only():
    frame = table(row(train(1, "weak"), 1e-3, run="r1"), row(train(2, "weak"), 1e-3, run="r2"))
    assert scaling(flag(frame)).empty


def test_relative_performance_is_a_geometric_mean_over_problems():
    other = Case.make("matmul", "torch", "cpu", params={"m": 32, "n": 32, "k": 32})
    frame = table(row(matmul(), 1e-3, "ref"), row(other, 1e-3, "ref"),
                  row(matmul(), 0.5e-3, "x"), row(other, 2e-3, "x"), row(matmul(), 0.25e-3, "y"))
    summary, reference = relative_performance(frame_of(frame))
    assert reference == "ref · cpu×1"  # most problems measured
    relative = summary.set_index("hardware")["relative"]
    assert relative["x · cpu×1"] == pytest.approx(1.0)  # 2x and 0.5x
    assert relative["y · cpu×1"] == pytest.approx(4.0)
    summary, reference = relative_performance(frame_of(frame), "y")
    assert reference == "y · cpu×1"
    with pytest.raises(ValueError, match="no usable results"):
        relative_performance(frame_of(frame), "nowhere")


def test_latest_row_of_a_case_supersedes_older_ones():
    frame = table(row(matmul(), 1e-3, time="2025-01-01T00:00:00+00:00", run="old"),
                  row(matmul(), 2e-3, time="2025-02-01T00:00:00+00:00", run="new"))
    assert list(latest(frame)["run_id"]) == ["new"]


def test_prices_machine_entry_wins_and_user_file_overrides(tmp_path, monkeypatch):
    user = tmp_path / "prices.toml"
    user.write_text('currency = "EUR"\n[machines]\n"rented" = 36.0\n[[device]]\nmatch = "H100"\nper_hour = 1.0\n'
                    '[cpu]\nper_core_hour = 0.5\n')
    monkeypatch.setenv("PARBENCH_PRICES", str(user))
    prices = PriceTable.load()
    assert prices.currency == "EUR"
    gpu = Case.make("matmul", "torch", "gpu", n_devices=1, params=MATMUL)
    frame = add_costs(table(row(matmul(), 1e-3, "rented"), row(matmul(), 1e-3, "own", cores=4),
                            row(gpu, 1e-4, "own", device_name="NVIDIA H100 80GB HBM3")), prices)
    per_hour = frame.set_index(["machine", "device"])["price_per_hour"]
    assert per_hour[("rented", "cpu")] == 36.0
    assert per_hour[("own", "cpu")] == 2.0  # 4 cores x 0.5
    assert per_hour[("own", "gpu")] == 1.0  # the user's H100 entry wins over the shipped one
    flops = 2 * 64**3
    cost = frame.set_index(["machine", "device"])["cost_per_pflop"]
    assert cost[("own", "gpu")] == pytest.approx(1.0 / 3600 * 1000 / (flops / 1e-4 / 1e12))


def test_choices_name_fastest_and_cheapest_separately():
    prices = PriceTable("USD", {"fast": 100.0, "cheap": 1.0}, (), None, ())
    frame = frame_of(table(row(matmul(), 1e-3, "fast"), row(matmul(), 2e-3, "cheap")), prices)
    choice = choices(frame.comparable).iloc[0]
    assert choice["fastest"].startswith("fast ·") and choice["cheapest"].startswith("cheap ·")
    assert choice["margin"] == pytest.approx(2.0) and choice["beyond_noise"]


def test_compare_regressions_need_threshold_and_noise_or_a_new_failure():
    a = table(row(matmul(), 1e-3, "a"), row(matmul(precision="bf16"), 1e-3, "a"),
              row(Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8}), 1e-3, "a"))
    b = table(row(matmul(), 1.3e-3, "b"), row(matmul(precision="bf16"), 1.02e-3, "b", spread=0.3),
              row(Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8}), 1e-3, "b",
                  status="failed", reason="numerics check failed"))
    pairs = compare(a, b).set_index("case_id")
    assert pairs.loc[matmul().id, "verdict"] == "B slower"
    assert pairs.loc[matmul(precision="bf16").id, "verdict"] == "same"
    assert set(regressions(pairs.reset_index(), 0.2)["case_id"]) == {
        matmul().id, Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8}).id}
    assert set(regressions(pairs.reset_index(), 0.5)["case_id"]) == {
        Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8}).id}
