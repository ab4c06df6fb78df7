"""`parbench calibrate` stores a measured peak that later runs report '% of measured peak' against."""
from __future__ import annotations

import json

import pytest

from suites.cases.vocabulary import DeviceKind, Framework, Precision
from suites.frontends.cli import main
from suites.hardware.devices import discover
from suites.hardware.peaks import PeakTable, calibration_path
from suites.records.store import ResultsStore

pytest.importorskip("torch")


def test_calibrate_then_run_reports_percent_of_measured_peak_and_the_roofline(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["calibrate", "--device", "cpu", "--sizes", "128", "--stream-mib", "4", "--results", str(results),
                 "--label", "lab"]) == 0
    stored = json.loads(calibration_path(results).read_text())
    (entry,) = stored["lab"].values()
    assert entry["fp32"]["tflops"] > 0
    assert entry["bandwidth"]["gbs"] > 0 and "STREAM add" in entry["bandwidth"]["how"]
    assert "cpu memory bandwidth" in capsys.readouterr().out
    grid = tmp_path / "g.toml"
    grid.write_text('[timing]\nbudget_s = 0.2\nwarmup_s = 0.02\n[[grid]]\nworkload = "matmul"\n'
                    'framework = "torch"\ndevice = "cpu"\nparams = { m = 128, n = 128, k = 128 }\n')
    assert main(["run", "--suite", str(grid), "--results", str(results), "--label", "lab"]) == 0
    (record,) = ResultsStore(results).load()
    expected = 100 * record.metrics["tflops"] / entry["fp32"]["tflops"]
    assert record.metrics["pct_peak_measured"] == pytest.approx(expected)
    # The roofline's slope is the measured bandwidth; its roof the table's peak, else the measured one.
    metrics = record.metrics
    assert metrics["roof_bandwidth_gbs"] == pytest.approx(entry["bandwidth"]["gbs"])
    assert metrics["arithmetic_intensity"] == pytest.approx(2 * 128**3 / (3 * 128 * 128 * 4))
    bound = min(metrics["roof_peak_tflops"], metrics["arithmetic_intensity"] * metrics["roof_bandwidth_gbs"] / 1000)
    assert metrics["roofline_bound_tflops"] == pytest.approx(bound)
    assert metrics["roofline_fraction"] == pytest.approx(metrics["tflops"] / bound)


def test_calibrate_refuses_a_streaming_array_of_no_size(capsys):
    assert main(["calibrate", "--device", "cpu", "--stream-mib", "0"]) != 0
    assert "--stream-mib" in capsys.readouterr().err


def test_peak_table_is_editable_through_an_environment_file(tmp_path, monkeypatch):
    import suites.hardware.peaks as peaks

    own = tmp_path / "peaks.toml"
    own.write_text('[[cpu]]\nisa = "avx2"\nfp32 = 1000\n')
    monkeypatch.setenv("PARBENCH_PEAKS", str(own))
    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: 3.0)  # many VMs have no cpufreq to tell it
    cpu = discover(Framework.TORCH, DeviceKind.CPU)
    peak = PeakTable.load().peak_tflops(cpu, Precision.FP32)
    if "avx2" not in cpu.details["isa"]:
        pytest.skip("this CPU has no AVX2")
    monkeypatch.delenv("PARBENCH_PEAKS")
    default = PeakTable.load().peak_tflops(cpu, Precision.FP32)
    if cpu.details.get("uarch") is None:  # the shipped table claims no peak for an unknown microarchitecture
        assert peak is not None and default is None
    else:
        assert peak is not None and default is not None and peak > 10 * default


def test_a_slow_precision_prints_a_figure_not_zero():
    from suites.frontends.commands.calibrate import tflops_text
    assert tflops_text(0.000312) == "0.000312 TFLOP/s"
    assert tflops_text(0.157) == "0.157 TFLOP/s" and tflops_text(989.4) == "989 TFLOP/s"
