"""`parbench calibrate` stores a measured peak that later runs report '% of measured peak' against."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status
from suites.frontends.cli import main
from suites.hardware.devices import discover
from suites.hardware.peaks import PeakTable, calibration_path
from suites.records.contention import Contention, CpuUsage
from suites.records.store import ResultsStore

pytest.importorskip("torch")


def test_calibrate_then_run_reports_percent_of_measured_peak_and_the_roofline(tmp_path, capsys, monkeypatch,
                                                                              fast_timing):
    import suites.frontends.commands.calibrate as calibrate
    # Real GEMMs and STREAM, judged quiet whatever else runs (the contention rule has tests of its own).
    monkeypatch.setattr(calibrate, "verdict", lambda before, usage, busy_expected: Contention(None, None, None, 2,
                                                                                              False, ""))
    # torch's GEMMs only (TensorFlow's would be imported into this process), each timed briefly: what is
    # checked is that the stored peak is the one later runs report against, not how good it is.
    monkeypatch.setattr(calibrate, "Framework", [Framework.TORCH])
    monkeypatch.setattr(calibrate, "TIMING", fast_timing)
    results = tmp_path / "results"
    assert main(["calibrate", "--device", "cpu", "--sizes", "128", "--stream-mib", "4", "--results", str(results),
                 "--label", "lab"]) == 0
    stored = json.loads(calibration_path(results).read_text())
    (entry,) = stored["lab"].values()
    assert entry["fp32"]["tflops"] > 0
    assert entry["bandwidth"]["gbs"] > 0 and "STREAM add" in entry["bandwidth"]["how"]
    assert "cpu memory bandwidth" in capsys.readouterr().out
    grid = tmp_path / "g.toml"
    grid.write_text('[timing]\nbudget_s = 0.2\nwarmup_s = 0.02\ncontention_retries = 0\n[[grid]]\nworkload = "matmul"\n'
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


# --- a stored peak is a maximum: a contended measurement is refused (issue 47 item 3) ------------------

class FakeMeter:
    """A CPU meter whose every window shows others taking `others` of 2 cores for 1 s."""
    others = 0.0

    def __init__(self, root=None):
        pass

    def start(self):
        pass

    def stop(self):
        return CpuUsage(1.0, own_s=0.5, busy_s=0.5 + 2 * FakeMeter.others, steal_s=0.0, cores=2)


@pytest.fixture
def fake_machine(monkeypatch):
    """calibrate over fake GEMMs and a fake STREAM: each GEMM takes the next share in `gemm_others`
    (others' share of the cores over its timed blocks), STREAM sees `FakeMeter.others`."""
    import suites.frontends.commands.calibrate as calibrate
    from suites.measure.stream import StreamResult
    from suites.records.measurement import Measurement
    from suites.runner.execute import Outcome

    state = {"gemm_others": [], "gemms": 0, "streams": 0}

    def execute_kernel(job, timing):
        others = state["gemm_others"][min(state["gemms"], len(state["gemm_others"]) - 1)]
        state["gemms"] += 1
        usage = CpuUsage(1.0, own_s=1.0, busy_s=1.0 + 2 * others, steal_s=0.0, cores=2, threads=2)
        return Outcome(Status.OK, measurement=Measurement((1e-3,) * 9, cpu=usage))

    def stream(array_mib, repeats=10, on_pass=None):
        state["streams"] += 1
        for done in range(1, 3):
            on_pass(2, done, 2)
        return StreamResult(20.0, array_mib, 2, 2)

    monkeypatch.setattr(calibrate, "execute_kernel", execute_kernel)
    monkeypatch.setattr(calibrate, "best_stream_bandwidth", stream)
    monkeypatch.setattr(calibrate, "CpuMeter", FakeMeter)
    monkeypatch.setattr(calibrate, "Framework", [Framework.TORCH])
    FakeMeter.others = 0.0
    return state


def calibrate_cpu(results) -> list[str]:
    return ["calibrate", "--device", "cpu", "--sizes", "64", "--stream-mib", "4", "--results", str(results),
            "--label", "lab"]


def test_a_contended_gemm_is_measured_again_then_refused_and_never_stored(tmp_path, capsys, fake_machine):
    fake_machine["gemm_others"] = [0.6]  # others took 60% of the cores every time
    assert main(calibrate_cpu(tmp_path)) == 1
    out = capsys.readouterr().out
    assert fake_machine["gemms"] == 3 and "try 3 of 3" in out
    assert "cpu fp32 peak" in out and "not stored: other work competed with it (others took 60%" in out
    (entry,) = json.loads(calibration_path(tmp_path).read_text())["lab"].values()
    assert "fp32" not in entry and entry["bandwidth"]["gbs"] == 20.0  # the quiet STREAM is kept


def test_a_quiet_retry_is_the_one_stored(tmp_path, capsys, fake_machine):
    fake_machine["gemm_others"] = [0.6, 0.02]
    assert main(calibrate_cpu(tmp_path)) == 0
    (entry,) = json.loads(calibration_path(tmp_path).read_text())["lab"].values()
    assert entry["fp32"]["tflops"] == pytest.approx(2 * 64**3 / 1e-3 / 1e12) and fake_machine["gemms"] == 2


def test_everything_contended_stores_nothing_and_says_so_in_one_line(tmp_path, capsys, fake_machine):
    fake_machine["gemm_others"] = [0.6]
    FakeMeter.others = 0.5
    assert main(calibrate_cpu(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("parbench: error: nothing stored: every measurement was contended") and err.count("\n") == 1
    assert fake_machine["streams"] == 3 and not calibration_path(tmp_path).exists()


def test_stream_progress_shows_off_a_terminal(tmp_path, capsys, fake_machine):
    fake_machine["gemm_others"] = [0.0]
    assert main(calibrate_cpu(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "STREAM add over 3 x 4 MiB" in out and "STREAM: 2 passes with 2 thread(s) done" in out


def test_unwritable_results_are_found_before_measuring(tmp_path, capsys, fake_machine, monkeypatch):
    import suites.records.store as store_module
    real_access = os.access
    monkeypatch.setattr(store_module.os, "access",
                        lambda p, mode, **kw: False if Path(p) == tmp_path else real_access(p, mode, **kw))
    assert main(calibrate_cpu(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "not writable" in err and err.count("\n") == 1 and fake_machine["gemms"] == 0


def test_a_calibration_file_it_cannot_add_to_is_found_before_measuring(tmp_path, capsys, fake_machine):
    """Issue 43: a calibration.json that is not JSON was found only when saving, after measuring."""
    calibration_path(tmp_path).write_text("{")
    assert main(calibrate_cpu(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("parbench: error: --results: ") and "not JSON" in err and "move it away" in err
    assert err.count("\n") == 1 and fake_machine["gemms"] == 0 and fake_machine["streams"] == 0
    assert calibration_path(tmp_path).read_text() == "{"


@pytest.mark.parametrize("given, cache, available, expected, warns", [
    (None, 32 * 2**20, 64 * 2**30, 128, ""),         # 4 x a 32 MiB L3
    (None, 2 * 2**20, 64 * 2**30, 16, ""),           # at least MIN_ARRAY_MIB
    (None, None, 64 * 2**30, 256, ""),               # cache unknown: the old default
    (None, 32 * 2**20, 400 * 2**20, 100, "allows 3 x 100 MiB"),  # memory allows less than 4 x the cache
    (8, 32 * 2**20, 64 * 2**30, 8, "--stream-mib 8 is under 4x the 32 MiB last-level cache"),
    (512, 32 * 2**20, 64 * 2**30, 512, ""),
])
def test_the_stream_is_sized_from_the_last_level_cache(given, cache, available, expected, warns):
    from suites.frontends.commands.calibrate import stream_size
    mib, note = stream_size(given, cache, available)
    assert mib == expected and (warns in note if warns else note == "")
