"""The measuring core: sync before clock reads, adaptive stopping, noise flags, statistics.

The timer's decisions are asserted against a controlled clock, which only the pretend device
advances: the tests mean the same on a quiet machine and on one whose cores are both busy.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from suites.cases.timing_config import TimingConfig
from suites.records.check import Check
from suites.records.measurement import OUT_OF_TIME, Measurement
from suites.measure.runnable import Runnable
from suites.measure.timing import (FIRST_STEP_ALLOWANCE_S, MIN_BUDGET_SAMPLES, TooSlow, case_limit_s,
                               measure)


class FakeClock:
    """Seconds that pass only when the pretend device works or a pretend peer is waited for."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class PretendDevice(Runnable):
    """Like a GPU: `step` only enqueues work (`duration(i)` seconds for step i); `synchronize`
    waits for it, which is when the clock moves."""

    def __init__(self, clock: FakeClock, duration: Callable[[int], float]) -> None:
        self.clock, self.duration = clock, duration
        self.steps, self.pending = 0, 0.0

    def setup(self) -> None: ...

    def step(self) -> None:
        self.pending += self.duration(self.steps)
        self.steps += 1

    def synchronize(self) -> None:
        self.clock.now += self.pending
        self.pending = 0.0

    def check(self) -> Check:
        return Check(True, "none", 0.0, 0.0)


def constant(seconds: float) -> Callable[[int], float]:
    return lambda i: seconds


def jittered(seconds: float, jitter: float) -> Callable[[int], float]:
    draws = np.random.default_rng(0).random(100_000)
    return lambda i: seconds * (1 + jitter * draws[i])


FAST = TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=0.5)


def test_timer_synchronises_before_reading_the_clock():
    clock = FakeClock()
    measurement = measure(PretendDevice(clock, constant(0.002)), FAST, clock)
    # Reading the clock before synchronising would see no time pass at all.
    assert measurement.median == pytest.approx(0.002)
    assert measurement.block_size == 5  # 10 ms blocks of 2 ms steps


def test_stable_case_converges_and_noisy_case_hits_budget_and_is_flagged():
    clock = FakeClock()
    stable = measure(PretendDevice(clock, constant(0.001)), replace_target(FAST, 0.1), clock)
    assert stable.stop_reason == "converged" and not stable.noisy
    # converged as soon as it was allowed to: min_samples blocks, min_time_s of timing
    assert stable.n >= FAST.min_samples and stable.timed_s == pytest.approx(FAST.min_time_s, abs=0.011)

    clock = FakeClock()
    config = TimingConfig(warmup_s=0.01, block_min_s=0.0, budget_s=0.3, target_rel_iqr=0.001)
    noisy = measure(PretendDevice(clock, jittered(0.001, 3.0)), config, clock)
    assert noisy.stop_reason == "time budget" and noisy.noisy
    assert noisy.n >= 7
    assert 0.3 <= noisy.timed_s < 0.3 + 0.004  # stopped at the first block past the budget


def replace_target(config: TimingConfig, target: float) -> TimingConfig:
    from dataclasses import replace
    return replace(config, target_rel_iqr=target)


def test_statistics_come_from_the_raw_samples():
    m = Measurement(samples=(1.0, 2.0, 3.0, 4.0, 100.0), first_step_s=10.0, target_rel_iqr=0.05)
    assert m.median == 3.0 and m.iqr == 2.0 and m.n == 5
    assert m.noisy and m.compile_s == 7.0
    assert Measurement.from_dict(m.to_dict()) == m


def test_sustained_rate_counts_every_second_timed_where_the_median_flatters():
    """Right-skewed interference: one block in five runs 3x slower. The median ignores it;
    steps timed / seconds timed does not."""
    clock = FakeClock()
    slow_every_fifth = lambda i: 0.003 if (i // 10) % 5 == 4 else 0.001  # noqa: E731 (10-step blocks)
    config = TimingConfig(warmup_s=0.0, min_warmup_steps=0, block_min_s=0.01, budget_s=1.0,
                          target_rel_iqr=0.001)
    m = measure(PretendDevice(clock, slow_every_fifth), config, clock)
    assert m.median == pytest.approx(0.001, rel=0.05)
    assert m.sustained_step_s == pytest.approx(m.timed_s / (m.n * m.block_size))
    assert m.sustained_step_s > 1.3 * m.median
    stored = m.to_dict()
    assert stored["sustained_step_s"] == m.sustained_step_s
    assert Measurement.from_dict(stored) == m


class WaitingRank(PretendDevice):
    """Rank 0 of a pretend two-rank case whose peer is slower: at every barrier rank 0 waits
    `wait_per_block` for it, and the gathered busy times say what the peer reported."""

    def __init__(self, clock: FakeClock, seconds: float, wait_per_block: float,
                 peer_busy_factor: float) -> None:
        super().__init__(clock, constant(seconds))
        self.wait_per_block, self.peer_busy_factor = wait_per_block, peer_busy_factor

    def barrier(self) -> None:
        self.clock.now += self.wait_per_block

    def gather(self, value: float) -> tuple[float, ...]:
        return (value, value * self.peer_busy_factor)


def test_samples_are_barrier_to_barrier_and_rank_busy_times_expose_a_straggler():
    config = TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=0.5, target_rel_iqr=0.5)
    clock = FakeClock()
    slow_peer = measure(WaitingRank(clock, 0.001, wait_per_block=0.01, peer_busy_factor=1.5),
                        config, clock)
    # the global sample includes the wait for the peer; this rank's busy time does not
    assert slow_peer.rank_medians[0] == pytest.approx(0.001)
    assert slow_peer.median == pytest.approx(0.001 + 0.01 / slow_peer.block_size)
    assert slow_peer.straggler and slow_peer.to_dict()["straggler"] is True
    clock = FakeClock()
    even = measure(WaitingRank(clock, 0.001, wait_per_block=0.0, peer_busy_factor=1.02), config, clock)
    assert len(even.rank_medians) == 2 and not even.straggler
    assert Measurement.from_dict(even.to_dict()) == even


def test_single_process_measurements_carry_no_rank_times():
    clock = FakeClock()
    single = measure(PretendDevice(clock, constant(0.001)), FAST, clock)
    assert single.rank_medians == () and not single.straggler


def test_under_ddp_compute_times_tell_a_straggler_that_busy_times_hide():
    # every DDP step waits in the all-reduce, so busy times are even; the no_sync times are not
    m = Measurement(samples=(0.020,) * 5, rank_medians=(0.0199, 0.0200), rank_compute=(0.010, 0.015))
    assert m.straggler and m.exchange_share == 0.25
    assert not Measurement(samples=(0.020,) * 5, rank_medians=(0.019, 0.030),
                           rank_compute=(0.010, 0.0105)).straggler
    assert Measurement.from_dict(m.to_dict()) == m and m.to_dict()["rank_compute_s"] == [0.010, 0.015]


# --- cases too slow for their budget -----------------------------------------------------------
BUDGET = TimingConfig(budget_s=4.0)  # the defaults: a case may take 5 x 4 s + warm-up


def test_a_first_step_over_its_limit_stops_the_case_with_that_reason():
    clock = FakeClock()
    device = PretendDevice(clock, constant(150.0))
    with pytest.raises(TooSlow, match=r"too slow here: first step 150 s, over the 60 s a first step may take"):
        measure(device, BUDGET, clock)
    assert device.steps == 1  # nothing more was run after the first step told


def test_a_first_step_that_compiles_for_longer_than_the_budget_is_no_step_cost():
    """Tracing / compilation makes the first step long; the warm steps are what is timed."""
    clock = FakeClock()
    compiles = lambda i: FIRST_STEP_ALLOWANCE_S - 1 if i == 0 else 0.001  # noqa: E731
    m = measure(PretendDevice(clock, compiles), TimingConfig(budget_s=0.3), clock)
    assert not m.cut_short and m.median == pytest.approx(0.001) and m.n >= 7


def test_slow_steps_are_kept_as_the_warm_samples_they_had_time_for_and_flagged():
    clock = FakeClock()
    device = PretendDevice(clock, lambda i: 5.0 if i == 0 else 6.0)
    m = measure(device, BUDGET, clock)
    assert m.stop_reason == OUT_OF_TIME and m.cut_short and m.to_dict()["cut_short"] is True
    assert m.samples == (6.0,) and m.first_step_s == 5.0
    assert clock.now - 5.0 <= case_limit_s(BUDGET)


def test_steps_slow_but_affordable_get_the_fewest_budget_samples_within_the_case_limit():
    clock = FakeClock()
    m = measure(PretendDevice(clock, constant(4.0)), BUDGET, clock)
    assert m.stop_reason == "time budget" and not m.cut_short
    assert m.n == MIN_BUDGET_SAMPLES
    assert clock.now - 4.0 <= case_limit_s(BUDGET)


def test_fast_cases_warm_up_for_the_configured_time_and_steps():
    clock = FakeClock()
    device = PretendDevice(clock, constant(0.001))
    m = measure(device, TimingConfig(warmup_s=0.25, min_warmup_steps=3), clock)
    assert m.warmup_steps == 250  # 0.25 s of 1 ms steps, the first one included


# --- estimated time remaining ---------------------------------------------------------------------
def test_eta_scales_the_remaining_estimates_by_how_the_finished_cases_went():
    from suites.runner.eta import Eta, duration_text
    eta = Eta([10.0, 0.0, 10.0, 20.0])
    assert eta.remaining_s() == 40.0  # nothing finished yet: the estimates as they are
    eta.finished(15.0)  # took 1.5x its estimate
    assert eta.remaining_s() == pytest.approx(1.5 * 30.0)
    eta.finished(0.5)  # an unavailable case: estimated at nothing
    eta.finished(5.0)
    assert eta.remaining_s() == pytest.approx(20.5 / 20.0 * 20.0)
    assert [duration_text(s) for s in (4.4, 200, 3900)] == ["4 s", "3 min 20 s", "1 h 05 min"]


def test_eta_of_a_case_is_nothing_when_unavailable_and_budget_plus_warm_up_otherwise():
    from suites.cases.case import Case
    from suites.runner.eta import IN_PROCESS_OVERHEAD_S
    from suites.runner.plan import plan
    from suites.runner.runner import Runner
    config = TimingConfig(budget_s=2.0, warmup_s=0.5)
    tf32_on_cpu = Case.make("matmul", "torch", "cpu", precision="tf32", params={"m": 8, "n": 8, "k": 8})
    assert Runner(config).estimate_s(plan(tf32_on_cpu)) == 0.0
    matmul = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})
    assert Runner(config).estimate_s(plan(matmul)) == 2.5 + IN_PROCESS_OVERHEAD_S


def test_a_case_too_slow_for_its_limit_is_stored_unavailable_with_the_reason(monkeypatch):
    pytest.importorskip("torch")
    from suites.cases.case import Case
    from suites.cases.vocabulary import Status
    from suites.runner.execute import execute_in_process
    from suites.strategies.jobs import job_for

    def first_step_too_long(runnable, config, clock=None):
        raise TooSlow(150.0, FIRST_STEP_ALLOWANCE_S)
    monkeypatch.setattr("suites.runner.execute.measure", first_step_too_long)
    case = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})
    outcome = execute_in_process(job_for(case), BUDGET)
    assert outcome.status is Status.UNAVAILABLE
    assert outcome.reason.startswith("too slow here: first step 150 s, over the 60 s a first step may take")
    assert outcome.check is not None and outcome.check.passed  # what it did compute, it kept
