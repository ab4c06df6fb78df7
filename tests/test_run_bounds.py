"""A run's bounds: `--max-minutes` leaves out what would not fit and says so; a case that cannot
finish inside its limit is stopped there, and the run goes on."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Status
from suites.frontends.cli import main
from suites.frontends.commands import run as run_command
from suites.records.store import ResultsStore
from suites.runner.eta import busy_machine_note
from suites.runner.deadline import case_timeout
from suites.runner.plan import plan
from suites.runner.runner import RunContext, Runner
from suites.strategies.jobs import job_for

#: Three CPU matmuls (the first one small) and a GPU one, unavailable here: it costs nothing.
GRID = """
[timing]
warmup_s = 0.02
block_min_s = 0.002
min_samples = 3
min_time_s = 0.01
budget_s = 0.2
[[grid]]
workload = "matmul"
framework = "torch"
device = ["cpu", "gpu"]
params = { m = [8, 16, 24], n = 8, k = 8 }
"""

#: What each case costs on the controlled clock: far more than its estimate (under a second).
CASE_S = 50.0


@pytest.fixture
def controlled_clock(monkeypatch):
    """The run's clock moves only when a CPU case runs, by CASE_S (the GPU cases are
    unavailable here: they take no time)."""
    now = [0.0]
    real_run = Runner.run

    def run(runner, planned):
        now[0] += CASE_S if planned.case.device is DeviceKind.CPU else 0.0
        return real_run(runner, planned)

    monkeypatch.setattr(run_command, "clock", lambda: now[0])
    monkeypatch.setattr(Runner, "run", run)


def test_max_minutes_leaves_out_what_would_not_fit_and_lists_it(capsys, tmp_path, results_dir, controlled_clock):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    code = main(["run", "--suite", str(grid), "--results", str(results_dir), "--filter", "device=cpu",
                 "--max-minutes", "1"])
    out = capsys.readouterr().out
    assert code == 0
    # The first case fits (estimate < 60 s); it then took 50 s, so the next ones' estimates,
    # scaled by that, no longer fit in the 10 s left.
    records = ResultsStore(results_dir).load()
    assert [r.case.param_dict["m"] for r in records] == [8] and records[0].status is Status.OK
    left_line = next(line for line in out.splitlines() if line.startswith("left out by --max-minutes"))
    assert left_line.startswith("left out by --max-minutes: 2 cases: ")
    assert "m=16" in left_line and "m=24" in left_line
    assert "1 ok, 0 unavailable, 0 failed" in out
    (summary_path,) = (results_dir / "parbench" / "runs").glob("*.json")
    summary = json.loads(summary_path.read_text())
    assert summary["max_minutes"] == 1 and summary["counts"] == {"ok": 1, "unavailable": 0, "failed": 0}
    assert [case_id.endswith(f"m={m},n=8") for case_id, m in zip(summary["left_out"], (16, 24))] == [True, True]


def test_max_minutes_still_records_cases_that_cost_nothing(capsys, tmp_path, results_dir, controlled_clock):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["run", "--suite", str(grid), "--results", str(results_dir), "--max-minutes", "1"]) == 0
    statuses = sorted(str(r.status) for r in ResultsStore(results_dir).load())
    # m=8 on the CPU, and the three GPU cases, unavailable here, estimated at nothing
    assert statuses == ["ok", "unavailable", "unavailable", "unavailable"]


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_max_minutes_that_is_no_positive_number_is_one_line(capsys, results_dir, value):
    assert main(["run", "--results", str(results_dir), "--max-minutes", value]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"parbench: error: argument --max-minutes: '{value}' is not valid")
    assert not results_dir.exists()


#: The probe's GEMM rate the bounded-case tests pretend: 1 GFLOP/s, so a case of N gflop is
#: predicted at N seconds a step.
PROBED_FLOPS_PER_S = 1e9


@pytest.fixture
def sleepy(monkeypatch):
    """The sleepy plugin workload registered here and in workers, for this test only; the
    probe's rate controlled."""
    from suites.runner import probe
    from suites.workloads import WORKLOADS
    from suites.workloads.user_model import PLUGINS_ENV, load_plugins

    monkeypatch.setenv(PLUGINS_ENV, str(Path(__file__).with_name("sleepy_workload.py")))
    load_plugins()
    monkeypatch.setattr(probe, "probe_flops_per_s", lambda *combination: PROBED_FLOPS_PER_S)
    yield
    WORKLOADS.pop("sleepy", None)  # the registry's other tests see the built-in workloads only
    sys.modules.pop("parbench_plugin_sleepy_workload", None)


def sleepy_case(step_ms: int, gflop: int) -> Case:
    return Case.make("sleepy", "torch", "cpu", params={"step_ms": step_ms, "gflop": gflop})


def test_a_case_that_overruns_its_limit_is_stopped_there_and_the_run_goes_on(sleepy, results_dir):
    # 12 GFLOP at 1 GFLOP/s: a 12 s first step, within 4 x its 5 s limit: run where it can be
    # stopped; its step sleeps an hour. (A first step predicted over 4 x the limit is refused
    # without running: the next test.) The limit leaves the quick case's worker time to import torch.
    stuck, quick = sleepy_case(step_ms=3_600_000, gflop=12), sleepy_case(step_ms=1, gflop=0)
    timing = TimingConfig(warmup_s=0.0, min_warmup_steps=1, min_samples=3, min_time_s=0.0, budget_s=0.05,
                          case_timeout_s=5.0)
    context = RunContext(suite="bounds", store=ResultsStore(results_dir), timing=timing)
    records = list(Runner.storing(context).run_all([stuck, quick]))
    assert [r.status for r in records] == [Status.UNAVAILABLE, Status.OK]
    assert records[0].reason.startswith("too slow here: not finished within its 5 s limit (predicted "
                                        "first step 12 s); stopped")
    assert [r.case for r in ResultsStore(results_dir).load()] == [stuck, quick]
    # The run's estimate counts it as what it costs at most: its deadline.
    assert Runner(timing).estimate_s(plan(stuck)) == case_timeout(timing, job_for(stuck)) == 5.0


def test_a_case_predicted_far_over_its_limit_is_refused_without_running(sleepy, results_dir):
    # 500 s predicted against a 60 s limit; were it run, its step would sleep an hour.
    refused = sleepy_case(step_ms=3_600_000, gflop=500)
    context = RunContext(suite="bounds", store=ResultsStore(results_dir), timing=TimingConfig())
    (record,) = Runner.storing(context).run_all([refused])
    assert record.status is Status.UNAVAILABLE
    assert record.reason.startswith("too slow here: predicted first step 500 s")
    assert record.measurement is None and record.check is None
    assert Runner(TimingConfig()).estimate_s(plan(refused)) == 0.0


def test_the_estimate_says_when_other_work_competes_for_the_cores():
    assert busy_machine_note(1.9, 2) == ""
    assert busy_machine_note(10.2, 2) == ("; load average 10.2 on 2 cores: other work competes for them, "
                                          "expect longer")


def test_a_cpu_case_asking_for_more_emulated_devices_than_the_machine_holds_is_unavailable():
    from suites.runner.availability import EMULATED_DEVICES_PER_CORE, emulation_reason

    cores = len(os.sched_getaffinity(0))
    most = EMULATED_DEVICES_PER_CORE * cores
    fits = Case.make("train_step", "torch", "cpu", "ddp", "fp32", most, {"model": "mlp", "batch": 8})
    too_many = Case.make("train_step", "torch", "cpu", "ddp", "fp32", 100_000, {"model": "mlp", "batch": 8})
    assert emulation_reason(fits) is None
    assert (f"100000 emulated CPU devices are more than this machine can hold: at most {EMULATED_DEVICES_PER_CORE} "
            f"per core, {most} on its {cores} cores") == emulation_reason(too_many)


@pytest.mark.parametrize("device, in_process", [(DeviceKind.GPU, False), (DeviceKind.CPU, True)])
def test_the_rate_probe_times_gpu_gemms_in_a_process_of_its_own(monkeypatch, device, in_process):
    """Issue 32, N5: a GPU probe in the parbench process left both frameworks' CUDA state on
    GPU 0 for the whole run, and had no deadline."""
    from suites.cases.vocabulary import Framework, Precision
    from suites.runner import probe
    from suites.runner.bounds import PROBE_TIMING
    from suites.runner.launchers import WORKER
    from suites.records.measurement import Measurement
    from suites.runner.execute import Outcome

    ran = []
    timed = Outcome(Status.OK, measurement=Measurement(samples=(2e-3, 1e-3, 3e-3)))
    monkeypatch.setattr(probe, "unavailable_reason", lambda planned: None)
    monkeypatch.setattr(probe, "execute_in_process", lambda job, timing: ran.append("in process") or timed)
    monkeypatch.setattr(probe.launchers, "run_isolated",
                        lambda job, timing: ran.append(f"isolated {WORKER}") or timed)
    assert probe._fastest_step_s(Framework.TORCH, device, Precision.BF16, 256) == 1e-3  # the probe (N5)
    kernel = job_for(Case.make("matmul", "torch", device.value, precision="bf16", params={"m": 64, "n": 64, "k": 64}))
    assert probe.execute_kernel(kernel, PROBE_TIMING) is timed  # calibrate (N18)
    assert ran == (["in process"] * 2 if in_process else [f"isolated {WORKER}"] * 2)
