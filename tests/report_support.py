"""Real results for the report tests, made by running small cases through parbench's own code.

Two machine labels on this one host, differing in torch's intra-op threads (1 vs 2), so the
multi-machine structure of a report is real: same cases, different environments and timings.
Unavailable cases are real (no GPU here; tf32 is GPU-only). The one failed case is a fault
injected into the runner's executor (a crash during timing), labelled as such in its reason.
asv and pytest-benchmark files are written by those tools' own code (asv's Results.save;
a pytest-benchmark run in a subprocess) from real parbench measurements.
"""
from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.frontends.asv_support import axis_params
from suites.records.asv_layout import AXES, case_id_from_axes
from suites.records.measurement import Measurement
from suites.records.store import ResultsStore
from suites.runner.execute import Outcome, failed
from suites.runner.execute import execute_in_process
from suites.strategies.jobs import job_for
from suites.runner.runner import RunContext, Runner

TINY = TimingConfig(warmup_s=0.02, min_warmup_steps=1, block_min_s=0.002, min_samples=10, min_time_s=0.04,
                    budget_s=0.15)
#: The runs' timing: TINY, and a measurement other work contended not taken again (up to twice more by
#: default), which the report's tests take as it comes (contended rows are flagged, not compared).
RUN_TIMING = replace(TINY, contention_retries=0)
MATMUL = {"m": 128, "n": 128, "k": 128}
CONV = {"batch": 4, "h": 16, "w": 16, "cin": 8, "cout": 8, "kernel": 3, "layout": "nhwc"}
OK_CASES = (
    Case.make("matmul", "torch", "cpu", params=MATMUL),
    Case.make("matmul", "torch", "cpu", precision="bf16", params=MATMUL),
    Case.make("conv2d", "torch", "cpu", params=CONV),
)
UNAVAILABLE_CASES = (
    Case.make("matmul", "torch", "gpu", params=MATMUL),
    Case.make("matmul", "torch", "cpu", precision="tf32", params=MATMUL),
)
FAILED_CASE = Case.make("conv2d", "torch", "cpu", precision="bf16", params=CONV)
#: label -> torch intra-op threads
MACHINES = {"ci-1thread": 1, "ci-2threads": 2}
XSS_LABEL = "<script>alert(1)</script>"


def injected_crash(case: Case, timing: TimingConfig) -> Outcome:
    try:
        raise RuntimeError("injected fault (test fixture): device lost during timing")
    except RuntimeError as error:
        return failed(error, "timing")


def run_machine(results: Path, label: str, threads: int, cases=OK_CASES + UNAVAILABLE_CASES,
                with_failure: bool = True) -> None:
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        context = RunContext(suite="report-test", store=ResultsStore(results), timing=RUN_TIMING, label=label)
        context.store.ensure_writable()
        for case in cases:
            Runner.storing(context).run(case)
        if with_failure:
            Runner.storing(context, launcher=injected_crash).run(FAILED_CASE)
    finally:
        torch.set_num_threads(previous)


def write_parbench(results: Path) -> None:
    for label, threads in MACHINES.items():
        run_machine(results, label, threads)


def asv_results(machine: str = "asv-box"):
    """An empty asv Results of `machine` (asv's own class), at a fixed commit and environment."""
    from asv.results import Results

    return Results({"machine": machine, "cpu": "test cpu", "num_cpu": "2", "os": "Linux", "ram": "16777216",
                    "python": "3.11"}, {"torch": "2.13.0"}, "0123456789abcdef0123", 1700000000000, "3.11",
                   "virtualenv-py3.11", {})


def add_asv_benchmark(run, name: str, version: str, cases: list[Case],
                      measured: dict[Case, Measurement | float], kind: str = "time") -> dict:
    """Add to `run` what asv records for a generated benchmark over `cases`: every combination
    of the named axes' values, `measured` ones with their result, the rest skipped (NaN: an
    unavailable case or a combination that is no case). Returns its benchmarks.json entry."""
    from asv.runner import BenchmarkResult

    axes = axis_params(cases)
    by_id = {case.id: value for case, value in measured.items()}
    values = [by_id.get(case_id_from_axes(cases[0].workload, combo)) for combo in itertools.product(*axes)]
    benchmark = {"name": name, "version": version, "type": kind, "param_names": list(AXES),
                 "params": [[repr(value) for value in axis] for axis in axes], "case_ids": [case.id for case in cases]}
    run.add_result(benchmark, BenchmarkResult(
        result=[_asv_value(value) for value in values],
        samples=[list(value.samples) if isinstance(value, Measurement) else None for value in values],
        number=[value.block_size if isinstance(value, Measurement) else None for value in values],
        errcode=0, stderr="", profile=None), record_samples=True)
    return benchmark


def _asv_value(value: Measurement | float | None) -> float:
    if isinstance(value, Measurement):
        return value.median
    return float("nan") if value is None else value


def save_asv(run, asv_dir: Path, index: dict[str, dict]) -> None:
    """Save `run` under `asv_dir` and `index` as its benchmarks.json, as `asv run` does."""
    from asv import util

    run.save(str(asv_dir))
    util.write_json(str(asv_dir / "benchmarks.json"), index, api_version=2)


def write_asv(results: Path, machine: str = "asv-box") -> Path:
    """An asv results file saved by asv itself, from real measurements: `Matmul.time_step` over
    the named axes of three cases (two measured, one unavailable: skipped), whose product holds a
    combination that is no case (gpu x bf16, skipped too), and `Conv2d.time_step` stored at
    version v1 while benchmarks.json says the current one is v2."""
    run = asv_results(machine)
    index = {}
    for name, cases, measured, stored_version in (
            ("kernels.Matmul.time_step", [OK_CASES[0], UNAVAILABLE_CASES[0], OK_CASES[1]],
             [OK_CASES[0], OK_CASES[1]], "v2"),
            ("kernels.Conv2d.time_step", [OK_CASES[2]], [OK_CASES[2]], "v1")):
        measurements = {case: execute_in_process(job_for(case), TINY).measurement for case in measured}
        assert None not in measurements.values()
        benchmark = add_asv_benchmark(run, name, stored_version, cases, measurements)
        index[name] = {**benchmark, "version": "v2"}
    asv_dir = results / "asv"
    save_asv(run, asv_dir, index)
    return next((asv_dir / machine).glob("*.json"))


PYTEST_CONFTEST = '''
from suites.records.provenance import environment

def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["parbench"] = environment("pytest-box")
'''

PYTEST_BENCHMARK = '''
from suites.cases.case import Case
from suites.strategies.jobs import job_for

CASE = Case.from_id({case_id!r})

def test_matmul(benchmark):
    runnable = job_for(CASE).runnable()
    runnable.setup()
    check = runnable.check()
    def step():
        runnable.step()
        runnable.synchronize()
    benchmark.pedantic(step, rounds=12, iterations=1, warmup_rounds=2)
    benchmark.extra_info.update(case=CASE.to_dict(), status="ok", metrics={{}}, check=check.to_dict(),
                                emulated=False)
'''


def write_pytest_benchmark(results: Path, workdir: Path) -> Path:
    """Run a real pytest-benchmark session in a subprocess; its JSON lands in results/pytest-benchmark/."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "conftest.py").write_text(PYTEST_CONFTEST)
    (workdir / "test_bench.py").write_text(textwrap.dedent(PYTEST_BENCHMARK.format(case_id=OK_CASES[0].id)))
    out = results / "pytest-benchmark" / "run.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(workdir),
                    "-c", "/dev/null", f"--benchmark-json={out}", "--benchmark-save-data", str(workdir)],
                   cwd=workdir, check=True, capture_output=True, timeout=300)
    return out
