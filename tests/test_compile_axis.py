"""The compile axis: ids, grids, filters, availability, compile time apart from step time,
recompilation detection, and the report's speedup and break-even.

The timer's decisions run against a controlled clock and a pretend compiler counter; one tiny
real compile per framework checks that a compiled kernel passes its numerics check.
"""
from __future__ import annotations

from typing import Callable

import pytest

from suites.cases.case import Case
from suites.cases.filters import select
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, Framework, Status, Strategy
from suites.errors import GridError, UserError
from suites.grids.grid import parse_suite
from suites.hardware.devices import framework_installed
from suites.records.measurement import Measurement
from suites.records.metric_registry import METRICS, Work
from suites.report.load.columns import case_fields, tidy
from suites.report.analyses.compilation import compile_pairs
from suites.runner import execute
from suites.runner.deadline import case_timeout
from suites.runner.execute import execute_in_process
from suites.strategies.jobs import job_for
from suites.measure.timing import (FIRST_STEP_ALLOWANCE_S, MAX_RECOMPILES, STABLE_STEPS, KeepsRecompiling, TooSlow,
                                   measure)
from suites.strategies.registry import find_plugin
from suites.strategies.torch.base import TorchStrategy
from tests.test_timing import FakeClock, PretendDevice, constant

#: Ids as stored before the compile axis existed (records, asv results, users' filters).
OLD_IDS = [
    "matmul/torch/cpu:1/single/fp32/k=512,m=512,n=512",
    "conv2d/tf/gpu:1/single/bf16/batch=16,cin=64,cout=64,h=32,kernel=3,layout=nhwc,w=32",
    "train_step/torch/cpu:2/ddp/fp16/batch=32,model=mlp",
    "train_step/tf/cpu:2/towers/fp32/batch=32,model=cnn,placement=param_server",
    "allreduce/torch/cpu:2/ddp/fp32/backend=gloo,elements=1048576",
]


# --- ids ----------------------------------------------------------------------------------
@pytest.mark.parametrize("old_id", OLD_IDS)
def test_ids_of_uncompiled_cases_are_unchanged_and_old_records_load_as_uncompiled(old_id):
    case = Case.from_id(old_id)
    assert case.compile is Compile.NONE and case.id == old_id
    old_record_case = {key: value for key, value in case.to_dict().items() if key != "compile"}
    assert Case.from_dict(old_record_case) == case


@pytest.mark.parametrize("compiler", ["xla", "inductor"])
def test_a_compiled_case_id_carries_its_compiler_on_the_precision_and_round_trips(compiler):
    case = Case.make("train_step", "torch", "cpu", "ddp", "bf16", 2, {"batch": 32, "model": "mlp"}, compiler)
    assert case.id == f"train_step/torch/cpu:2/ddp/bf16+{compiler}/batch=32,model=mlp"
    assert Case.from_id(case.id) == case and Case.from_dict(case.to_dict()) == case
    assert case != Case.make("train_step", "torch", "cpu", "ddp", "bf16", 2, {"batch": 32, "model": "mlp"})


@pytest.mark.parametrize("bad", ["matmul/torch/cpu:1/single/fp32+none/m=1", "matmul/torch/cpu:1/single/fp32+jit/m=1"])
def test_an_id_with_no_or_an_unknown_compiler_suffix_is_no_case(bad):
    with pytest.raises(ValueError, match="not a case id"):
        Case.from_id(bad)


# --- grids and filters ----------------------------------------------------------------------
GRID = """
[[grid]]
workload = "matmul"
framework = ["torch", "tf"]
device = "cpu"
compile = ["none", "xla", "inductor"]
params = { m = 64, n = 64, k = 64, compile_mode = ["default", "max-autotune"] }
"""


def test_each_framework_gets_its_own_compilers_and_only_inductor_cases_its_mode():
    ids = [case.id for case in parse_suite(GRID, "g.toml", "g").cases]
    assert ids == ["matmul/torch/cpu:1/single/fp32/k=64,m=64,n=64",
                   "matmul/torch/cpu:1/single/fp32+inductor/compile_mode=default,k=64,m=64,n=64",
                   "matmul/torch/cpu:1/single/fp32+inductor/compile_mode=max-autotune,k=64,m=64,n=64",
                   "matmul/tf/cpu:1/single/fp32/k=64,m=64,n=64",
                   "matmul/tf/cpu:1/single/fp32+xla/k=64,m=64,n=64"]


def test_a_compiler_of_none_of_the_entrys_frameworks_is_an_error_naming_each_frameworks():
    text = '[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\ncompile = "xla"\n' \
           'params = { m = 64, n = 64, k = 64 }\n'
    with pytest.raises(GridError, match=r"g.toml.*compile.*'xla' is not a compiler of torch.*tf: none, xla"):
        parse_suite(text, "g.toml", "g")


def test_filter_by_compile_and_globs_for_the_eager_case_leave_its_compiled_twins_out():
    cases = parse_suite(GRID, "g.toml", "g").cases
    assert [c.compile for c in select(cases, "compile=xla,inductor framework=tf", "g")] == [Compile.XLA]
    assert {c.compile for c in select(cases, "compile=none", "g")} == {Compile.NONE}
    assert [c.id for c in select(cases, "*/fp32/*", "g")] == [c.id for c in cases if c.compile is Compile.NONE]
    with pytest.raises(UserError, match="no case has compile jit; the suite's compile values: none, inductor, xla"):
        select(cases, "compile=jit", "g")


# --- availability ---------------------------------------------------------------------------
def train(framework: str, strategy: str, compiler: str, workload: str = "train_step") -> Case:
    params = {"batch": 32, "model": "mlp"} if workload == "train_step" else {"elements": 1024}
    return Case.make(workload, framework, "cpu", strategy, "fp32", 2, params, compiler)


@pytest.mark.parametrize("case, reason", [
    (train("tf", "towers", "xla"), "tf strategy 'towers' does not run under xla: its step places each tower's ops"),
    (train("torch", "pipeline", "inductor"), "torch strategy 'pipeline' does not run under inductor: its schedule"),
    (train("torch", "fsdp", "inductor"), "does not run under inductor: the plugin declares no inductor support"),
    (train("torch", "ddp", "inductor", "allreduce"), "allreduce is one collective call: inductor has nothing"),
])
def test_a_strategy_that_does_not_run_under_a_compiler_is_unavailable_with_the_reason(case, reason):
    assert reason in job_for(case).strategy.compile_reason(job_for(case))


@pytest.mark.parametrize("case", [train("torch", "ddp", "inductor"), train("tf", "mirrored", "xla"),
                                  train("tf", "multiworker", "xla"), train("torch", "ddp", "none")])
def test_ddp_under_inductor_and_mirrored_under_xla_are_available(case):
    assert job_for(case).strategy.compile_reason(job_for(case)) is None


def test_a_new_strategy_inherits_compilers_but_runs_under_none_until_it_declares_them():
    class NewStrategy(TorchStrategy):
        strategy = Strategy.TENSOR

    plugin = NewStrategy()
    assert Compile.INDUCTOR in plugin.rules.compilers and plugin.rules.compile_modes == {Compile.NONE}
    assert "declares no inductor support" in plugin.compile_reason(job_for(train("torch", "tensor", "inductor")))
    assert find_plugin(Framework.TF, Strategy.SINGLE).rules.compilers == {Compile.NONE, Compile.XLA}


# --- compile time apart, and recompilation --------------------------------------------------
class PretendCompiled(PretendDevice):
    """A compiled step: step i compiles when `compiles(i)`, which the counter shows."""

    def __init__(self, clock: FakeClock, duration: Callable[[int], float], compiles: Callable[[int], bool]) -> None:
        super().__init__(clock, duration)
        self.compiles, self.count, self.forgotten_at = compiles, 0, []
        self.details: dict = {}

    def step(self) -> None:
        self.count += self.compiles(self.steps)
        super().step()

    def compilations(self) -> int:
        return self.count

    def compile_anew(self) -> None:
        self.forgotten_at.append(self.steps)


FAST = TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=0.5)


def test_compile_time_is_the_first_step_beyond_a_warm_one_and_no_sample_holds_it():
    clock = FakeClock()
    runnable = PretendCompiled(clock, lambda i: 5.0 if i == 0 else 0.002, lambda i: i == 0)
    measurement = measure(runnable, FAST, clock)
    assert runnable.forgotten_at == [0]  # the check's compile forgotten before the first step
    assert measurement.first_step_s == pytest.approx(5.0)
    assert measurement.compile_s == pytest.approx(4.998)
    assert max(measurement.samples) == pytest.approx(0.002) and measurement.recompiles == 0


def test_a_compiled_first_step_may_take_longer_than_an_uncompiled_one():
    slow_first = lambda i: FIRST_STEP_ALLOWANCE_S + 40 if i == 0 else 0.002  # noqa: E731
    clock = FakeClock()
    assert measure(PretendCompiled(clock, slow_first, lambda i: i == 0), FAST, clock).compile_s > FIRST_STEP_ALLOWANCE_S
    clock = FakeClock()
    with pytest.raises(TooSlow):
        measure(PretendDevice(clock, slow_first), FAST, clock)


def test_warm_up_lasts_until_recompiles_stop_and_counts_them():
    clock = FakeClock()
    # Steps 1..4 recompile (say, a guard on a value that changes), then never again.
    runnable = PretendCompiled(clock, lambda i: 0.05 if i < 5 else 0.002, lambda i: i < 5)
    measurement = measure(runnable, FAST, clock)
    assert measurement.recompiles == 4
    assert measurement.warmup_steps >= 5 + STABLE_STEPS
    assert max(measurement.samples) == pytest.approx(0.002)


def test_a_case_that_keeps_recompiling_fails_with_that_reason(monkeypatch):
    clock = FakeClock()
    runnable = PretendCompiled(clock, constant(0.002), lambda i: True)
    with pytest.raises(KeepsRecompiling, match=f"keeps recompiling: {MAX_RECOMPILES + 1} compilation"):
        measure(runnable, FAST, clock)

    class Job:
        runnable_class = staticmethod(lambda job: PretendCompiled(FakeClock(), constant(0.002), lambda i: True))

    outcome = execute.execute_in_process(Job(), FAST)
    assert outcome.status is Status.FAILED and outcome.reason.startswith("keeps recompiling")


def test_a_compile_during_the_timed_steps_fails_the_case():
    clock = FakeClock()
    runnable = PretendCompiled(clock, constant(0.002), lambda i: i == 0 or i == 60)
    with pytest.raises(KeepsRecompiling, match="over .* timed step"):
        measure(runnable, FAST, clock)


def test_recompiles_are_stored_and_older_measurements_load_without_them():
    stored = Measurement(samples=(0.1, 0.1), first_step_s=2.1, recompiles=1).to_dict()
    assert Measurement.from_dict(stored).recompiles == 1 and stored["compile_s"] == pytest.approx(2.0)
    del stored["recompiles"]
    assert Measurement.from_dict(stored).recompiles is None


# --- report ---------------------------------------------------------------------------------
def _row(compiler: str, median_s: float, compile_s: float, mode: str | None = None) -> dict:
    params = {"k": 64, "m": 64, "n": 64} | ({"compile_mode": mode} if mode else {})
    case = Case.make("matmul", "torch", "cpu", params=params, compile=compiler)
    samples = (median_s,) * 9
    return {"source": "parbench", "machine": "box", **case_fields(case), "status": "ok", "median_s": median_s,
            "q1_s": median_s, "q3_s": median_s, "samples_s": samples, "n": 9, "tflops": 2 * 64**3 / median_s / 1e12,
            "compile_s": compile_s, "check_passed": True, "run_id": "r", "timestamp": "2026-01-01T00:00:00Z"}


def test_report_pairs_each_compiled_case_with_its_eager_twin_speedup_and_break_even():
    from suites.report.analyses.comparability import flag
    from suites.report.analyses.selection import latest
    from suites.report.load.derived import add_throughput

    frame = add_throughput(tidy([_row("none", 0.010, 0.001), _row("inductor", 0.008, 3.0),
                                 _row("inductor", 0.012, 5.0, mode="max-autotune")]))
    flagged = flag(frame)
    pairs = compile_pairs(flagged, latest(flagged)).set_index("compile")
    assert set(pairs.index) == {"inductor", "inductor (max-autotune)"}
    faster = pairs.loc["inductor"]
    assert faster["speedup"] == pytest.approx(1.25) and faster["median_s_base"] == pytest.approx(0.010)
    # 3 s of compiling, 2 ms saved per step: 1500 steps to break even.
    assert faster["break_even_steps"] == pytest.approx(1500) and faster["break_even"] == "1,500"
    slower = pairs.loc["inductor (max-autotune)"]
    assert slower["speedup"] == pytest.approx(0.010 / 0.012) and slower["break_even"] == "never"


def test_break_even_is_compile_time_over_the_time_saved_per_step():
    metric = METRICS["compile_break_even_steps"]
    assert metric.value(Work(median_s=0.5, compile_s=10.0, eager_median_s=1.0)) == pytest.approx(20)
    assert metric.value(Work(median_s=1.0, compile_s=10.0, eager_median_s=1.0)) is None
    assert metric.value(Work(median_s=1.0, compile_s=10.0)) is None  # no eager twin: no such metric


# --- one tiny real compile per framework ---------------------------------------------------
TINY = TimingConfig(warmup_s=0.01, min_warmup_steps=1, block_min_s=0.005, min_samples=3, min_time_s=0.01,
                    target_rel_iqr=0.5, budget_s=0.05)


@pytest.mark.parametrize("framework, compiler", [("torch", "inductor"), ("tf", "xla")])
def test_a_compiled_kernel_passes_the_numerics_check_with_its_compile_time_apart(framework, compiler):
    if not framework_installed(Framework(framework)):
        pytest.skip(f"{framework} is not installed")
    case = Case.make("matmul", framework, "cpu", params={"m": 32, "n": 32, "k": 32}, compile=compiler)
    outcome = execute_in_process(job_for(case), TINY)
    assert outcome.status is Status.OK, outcome.reason
    assert outcome.check.passed and outcome.measurement.recompiles == 0
    assert outcome.measurement.compile_s > 0  # a real compile: the first step is not a warm one


def test_interleaved_speedup_is_the_geometric_mean_of_abba_round_ratios():
    from suites.studies.compile_speedup import Interleaved, eager_twin

    case = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8, "compile_mode": "max-autotune"},
                     compile="inductor")
    assert eager_twin(case).id == "matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8"
    # Round 1: eager 1.0 + 1.0 vs compiled 0.5 + 0.5 (x2); round 2: 1.0 + 1.0 vs 1.0 + 1.0 (x1).
    result = Interleaved(case, (1.0, 1.0, 1.0, 1.0), (0.5, 0.5, 1.0, 1.0), (4.0, 6.0, 6.0, 8.0))
    assert result.round_ratios == [2.0, 1.0] and result.speedup == pytest.approx(2 ** 0.5)
    # 6 s of compiling over 1 - 1/sqrt(2) s saved per step.
    assert result.break_even_steps == pytest.approx(6.0 / (1 - 2 ** -0.5))


def test_a_launched_compiled_case_is_given_time_for_two_cold_compiles():
    from suites.measure.timing import COMPILED_FIRST_STEP_ALLOWANCE_S

    eager, compiled = train("torch", "ddp", "none"), train("torch", "ddp", "inductor")
    extra = case_timeout(FAST, job_for(compiled)) - case_timeout(FAST, job_for(eager))
    assert extra >= 2 * COMPILED_FIRST_STEP_ALLOWANCE_S - 60
