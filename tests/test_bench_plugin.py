"""The pytest-benchmark front end: smoke selection, the JSON contract, skips and failures."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import ClassVar, Mapping

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Framework
from suites.frontends.prepared import CaseUnavailable, NumericsFailed, prepare
from suites.frontends.pytest_plugin import smoke_cases
from suites.grids.grid import load_suite
from suites.records.check import Check
from suites.measure.runnable import Runnable
from suites.measure.unsupported import Unsupported
from suites.workloads import WORKLOADS, Workload

ROOT = Path(__file__).resolve().parent.parent
#: pytester restores sys.modules after each test, and torch cannot be imported twice in one
#: process: torch runs only in pytester's subprocesses here.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

GRID = """
[timing]
min_samples = 4
warmup_s = 0.02

[[grid]]
workload = "matmul"
framework = "torch"
device = ["cpu", "gpu"]
params = [{ m = 64, n = 64, k = 64 }, { m = 96, n = 96, k = 96 }]
"""
SMALL = "matmul/torch/cpu:1/single/fp32/k=64,m=64,n=64"
LARGER = "matmul/torch/cpu:1/single/fp32/k=96,m=96,n=96"


def test_smoke_is_the_cheapest_case_of_each_kind_of_case():
    quick = load_suite("quick").cases
    smoke = smoke_cases(quick)
    heavy = {case.id for case in quick if case not in smoke}
    assert heavy == {f"matmul/{fw}/{dev}:1/single/fp32/k=2048,m=2048,n=2048"
                     for fw in ("torch", "tf") for dev in ("cpu", "gpu")}
    assert len(smoke) == len(quick) - 4


def run_suite(pytester: pytest.Pytester, *options: str) -> pytest.RunResult:
    pytester.makepyfile(test_bench_suite=(ROOT / "tests" / "test_bench_suite.py").read_text())
    grid = pytester.path / "grid.toml"
    grid.write_text(GRID)
    return pytester.runpytest_subprocess("-p", "suites.frontends.pytest_plugin", "-p", "no:cacheprovider",
                                         "--parbench-suite", str(grid), "-rs", *options, timeout=300)


@needs_torch
def test_benchmark_json_carries_case_metrics_check_and_provenance(pytester):
    out = pytester.path / "results" / "pytest-benchmark" / "run.json"
    out.parent.mkdir(parents=True)  # pytest-benchmark opens the file at start-up
    result = run_suite(pytester, f"--benchmark-json={out}")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.re_match_lines_random([r"SKIPPED \[1\] .*: no gpu: .*",
                                         r"SKIPPED \[2\] .*heavy benchmark: run with --heavy"])
    data = json.loads(out.read_text())
    (benchmark,) = data["benchmarks"]
    extra = benchmark["extra_info"]
    assert set(extra) == {"case", "status", "metrics", "check", "emulated", "compile_s"}
    assert extra["case"] == Case.from_id(SMALL).to_dict()
    assert extra["status"] == "ok" and extra["emulated"] is False
    assert extra["check"]["passed"] is True and extra["check"]["metric"] == "max_rel_err"
    stats = benchmark["stats"]
    assert stats["rounds"] == 4 and stats["iterations"] >= 1  # the grid's min_samples; the core's block
    assert extra["metrics"]["tflops"] == pytest.approx(2 * 64**3 / stats["median"] / 1e12)
    parbench = data["machine_info"]["parbench"]
    assert {"machine", "gpus", "libraries", "git", "cpu", "threads"} <= set(parbench)
    assert "torch" in parbench["libraries"]


@needs_torch
def test_heavy_cases_run_with_heavy_and_benchmark_disable_still_runs_each_case(pytester):
    result = run_suite(pytester, "--heavy", "--benchmark-disable")
    result.assert_outcomes(passed=2, skipped=2)


def test_an_unknown_suite_is_a_usage_error(pytester):
    pytester.makepyfile(test_bench_suite=(ROOT / "tests" / "test_bench_suite.py").read_text())
    result = pytester.runpytest_subprocess("-p", "suites.frontends.pytest_plugin", "-p", "no:cacheprovider",
                                           "--parbench-suite", "nosuch", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown suite 'nosuch'*"])


class Scripted(Runnable):
    """A runnable whose numerics check result, or set-up failure, the test chooses."""

    passes = True
    unsupported = False
    torn_down: ClassVar[list[str]] = []

    def setup(self) -> None:
        if self.unsupported:
            raise Unsupported("no kernel for this layout")

    def step(self) -> None: ...

    def synchronize(self) -> None: ...

    def check(self) -> Check:
        return Check(self.passes, "max_rel_err", 0.0 if self.passes else 1.0, 1e-4)

    def teardown(self) -> None:
        Scripted.torn_down.append(self.case.id)


class WrongAnswer(Scripted):
    passes = False


class NoKernel(Scripted):
    unsupported = True


def scripted_workload(runnable: type[Runnable]) -> type[Workload]:
    class ScriptedWorkload(Workload):
        name = "scripted"
        kind = "kernel"
        params = ()
        implementations: ClassVar[Mapping[Framework, str]] = {
            Framework.TORCH: f"{__name__}:{runnable.__name__}"}

        def flops_per_step(self) -> float:
            return 1.0
    return ScriptedWorkload


@needs_torch  # the scripted case is a torch case: availability asks whether torch is installed
@pytest.mark.parametrize("runnable, error", [(WrongAnswer, NumericsFailed), (NoKernel, CaseUnavailable)])
def test_prepare_reports_wrong_numerics_and_missing_kernels_and_releases_the_case(monkeypatch, runnable, error):
    monkeypatch.setitem(WORKLOADS, "scripted", scripted_workload(runnable))
    case = Case.make("scripted", "torch", "cpu")
    Scripted.torn_down.clear()
    with pytest.raises(error):
        prepare(case, TimingConfig())
    assert Scripted.torn_down == [case.id]


def test_a_process_that_timed_one_framework_on_the_gpu_refuses_the_others(monkeypatch):
    """Issue 32, N6: pytest-benchmark and asv time in their own process; TF keeps the GPU memory
    it took, so a torch GPU case timed after a TF one (or the reverse) measured a squeezed GPU."""
    from suites.cases.case import Case
    from suites.frontends import prepared

    monkeypatch.setattr(prepared, "_GPU_FRAMEWORK", [])
    tf_gpu = Case.make("matmul", "tf", "gpu", params={"m": 64, "n": 64, "k": 64})
    torch_gpu = Case.make("matmul", "torch", "gpu", params={"m": 64, "n": 64, "k": 64})
    torch_cpu = Case.make("matmul", "torch", "cpu", params={"m": 64, "n": 64, "k": 64})
    assert prepared.other_framework_on_gpu_reason(tf_gpu) is None
    assert prepared.other_framework_on_gpu_reason(tf_gpu) is None
    assert prepared.other_framework_on_gpu_reason(torch_cpu) is None
    assert "already timed tf on the GPU" in prepared.other_framework_on_gpu_reason(torch_gpu)
