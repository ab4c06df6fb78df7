"""`--max-minutes` is a cap (issue 47 item 4): estimates scaled by the contention measured so far,
a run that ends within the cap and its stated margin whatever the load, cases that cost nothing
always recorded, compiled cases kept with their eager twins, and the cap honoured by --rehearse.
Controlled clocks and fake contention readers throughout: no wall-clock thresholds."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, DeviceKind, Status
from suites.frontends.case_loop import run_cases
from suites.frontends.cli import main
from suites.frontends.commands import run as run_command
from suites.records.record import Record
from suites.runner.cap import MIN_MARGIN_S, RunCap, slowdown, units
from suites.runner.eta import Eta
from suites.runner.runner import Runner
from tests.test_run_bounds import GRID  # three CPU matmuls and their GPU twins, unavailable here


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def matmul(m: int, compile: str = "none", device: str = "cpu") -> Case:
    return Case.make("matmul", "torch", device, params={"m": m, "n": 8, "k": 8}, compile=compile)


# --- the cap's rule ------------------------------------------------------------------------------

def test_contention_scales_the_estimate_before_any_case_finished():
    clock = Clock()
    quiet = RunCap(60.0, clock, contention=lambda: 0.0)
    busy = RunCap(60.0, clock, contention=lambda: 0.6)
    assert quiet.admits(40.0) and not busy.admits(40.0)  # 40 s x 1.6 = 64 s > 60 s
    assert slowdown(1.0) == 2.0 and slowdown(0.0) == 1.0 and slowdown(3.0) == 2.0


def test_the_larger_of_the_runs_own_scale_and_the_contention_counts():
    clock = Clock()
    cap = RunCap(60.0, clock, contention=lambda: 0.1)
    assert cap.admits(20.0, run_scale=2.9) and not cap.admits(20.0, run_scale=3.1)
    assert cap.scale(0.5) == pytest.approx(1.1)  # a run faster than estimated: never scaled below the load's


def test_a_window_too_short_to_say_keeps_the_last_share():
    shares = iter([0.8, None, None])
    cap = RunCap(60.0, Clock(), contention=lambda: next(shares))
    assert cap.scale(1.0) == pytest.approx(1.8) and cap.scale(1.0) == pytest.approx(1.8)


def test_what_costs_nothing_always_fits_even_past_the_cap():
    clock = Clock()
    cap = RunCap(60.0, clock)
    clock.now = 500.0
    assert cap.admits(0.0) and not cap.admits(0.1)


def test_retries_only_while_they_fit():
    clock = Clock()
    cap = RunCap(100.0, clock)
    assert cap.retries_that_fit(10.0, 1.0, 2) == 2
    clock.now = 75.0
    assert cap.retries_that_fit(10.0, 1.0, 2) == 1  # 75 + 10 + one retry of 10 fits 100; two do not
    clock.now = 95.0
    assert cap.retries_that_fit(10.0, 1.0, 2) == 0


def test_the_margin_is_stated_and_a_run_past_the_cap_says_by_how_much():
    clock = Clock()
    cap = RunCap(180.0, clock)
    assert cap.margin_s == MIN_MARGIN_S and RunCap(3600.0, clock).margin_s == 360.0
    assert cap.past_text() == ""
    clock.now = 200.0
    assert cap.past_text() == "ended 20 s past the cap (within its margin of 30 s)"


def test_a_compiled_case_is_one_unit_with_its_eager_twin():
    cases = [matmul(8), matmul(8, "inductor"), matmul(16), matmul(16, "inductor"), matmul(32, "inductor"),
             matmul(8, "none", "gpu")]
    assert units(cases) == [(0, 1), (2, 3), (4,), (5,)]
    tf = [Case.make("matmul", "tf", "cpu", params={"m": 8}), Case.make("matmul", "tf", "cpu", params={"m": 8},
                                                                        compile=Compile.XLA)]
    assert units(tf) == [(0, 1)] and units([*tf, *cases[:2]]) == [(0, 1), (2, 3)]


# --- the cap over a whole run: whatever the load, within the margin ------------------------------

@dataclass
class FakeRunner:
    """Each case takes its estimate times (1 + load) on the controlled clock, like a case whose
    cores other work shares; an unavailable (GPU) case takes nothing."""
    clock: Clock
    estimates: dict[str, float]
    load: float
    timing: TimingConfig = field(default_factory=TimingConfig)

    def run(self, case: Case) -> Record:
        self.clock.now += self.estimates[case.id] * (1 + self.load)
        status = Status.UNAVAILABLE if case.device is DeviceKind.GPU else Status.OK
        return Record(case=case, status=status, run_id="r", timestamp="t", suite="s", environment={})


class Silent:
    def ended(self, *args) -> None:
        pass


@pytest.mark.parametrize("load", [0.0, 0.5, 1.0])
def test_a_capped_run_ends_within_the_cap_and_its_margin_whatever_the_load(load):
    clock = Clock()
    cases = [matmul(m) for m in range(8, 8 + 40)] + [matmul(8, "none", "gpu")]
    estimates = {case.id: 0.0 if case.device is DeviceKind.GPU else 9.0 for case in cases}
    cap = RunCap(180.0, clock, contention=lambda: load)
    runner = FakeRunner(clock, estimates, load)
    eta = Eta([estimates[case.id] for case in cases])
    records = run_cases(runner, cases, cases, eta, cap, Silent(), clock, 0.0)
    assert clock.now <= cap.limit_s + cap.margin_s
    assert clock.now > cap.limit_s / 2  # and it used the time it had
    assert records[-1].status is Status.UNAVAILABLE  # after the cap fell: recorded, never left out
    assert len(records) - 1 + len(cap.left_out) == 40


def test_a_capped_compile_suite_keeps_pairs_together():
    clock = Clock()
    cases = [matmul(m, compile) for m in (8, 16, 24) for compile in ("none", "inductor")]
    estimates = {case.id: (35.0 if case.compile is Compile.INDUCTOR else 5.0) for case in cases}
    cap = RunCap(90.0, clock, contention=lambda: 0.0)
    records = run_cases(FakeRunner(clock, estimates, 0.0), cases, cases,
                        Eta([estimates[case.id] for case in cases]), cap, Silent(), clock, 0.0)
    ran = [record.case for record in records]
    assert ran == cases[:4]  # two pairs fit (80 s); the third pair is left out whole, not its eager half
    assert cap.left_out == cases[4:]


# --- through `parbench run` ------------------------------------------------------------------------



@pytest.fixture
def controlled(monkeypatch):
    """The run's clock moves by 50 s whenever a CPU case (or a GPU case's rehearsal) runs, which
    stores an ok record without measuring; the machine's load is a fake 0."""
    clock = Clock()

    def run(runner, planned):
        case = getattr(planned, "case", planned)
        if case.device is DeviceKind.GPU:
            return real_run(runner, planned)
        clock.now += 50.0
        return Record(case=case, status=Status.OK, run_id="r", timestamp="t", suite="s", environment={})

    real_run = Runner.run
    monkeypatch.setattr(run_command, "clock", clock)
    monkeypatch.setattr(run_command, "machine_load", lambda: (lambda: 0.0))
    monkeypatch.setattr(Runner, "run", run)
    return clock


def test_rehearse_honours_the_cap(tmp_path, capsys, controlled):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["run", "--suite", str(grid), "--rehearse", "--max-minutes", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("left out (--max-minutes)") >= 2  # the rows; the first rehearsal ran
    assert "1 ok, 0 unavailable, 0 failed, 0 not rehearsed, 2 left out (--max-minutes)" in out


def test_the_summary_stores_the_elapsed_time_beside_the_cap(tmp_path, capsys, controlled, results_dir):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["run", "--suite", str(grid), "--results", str(results_dir), "--max-minutes", "1"]) == 0
    (path,) = (results_dir / "parbench" / "runs").glob("*.json")
    summary = json.loads(path.read_text())
    assert summary["elapsed_s"] <= 60 + MIN_MARGIN_S and summary["counts"]["unavailable"] == 3
