"""The measuring core: sync before clock reads, adaptive stopping, noise flags, statistics."""
from __future__ import annotations

import threading
import time

import numpy as np

from suites.check import Check
from suites.measurement import Measurement
from suites.runnable import Runnable
from suites.timing import TimingConfig, measure


class AsyncSleeper(Runnable):
    """Like a GPU: `step` only enqueues `seconds` of work on another thread; `synchronize` waits."""

    def __init__(self, seconds: float, jitter: float = 0.0) -> None:
        self.seconds, self.jitter = seconds, jitter
        self.pending: list[threading.Thread] = []
        self.rng = np.random.default_rng(0)

    def setup(self) -> None: ...

    def step(self) -> None:
        duration = self.seconds * (1 + self.jitter * self.rng.random())
        previous = self.pending[-1] if self.pending else None

        def work() -> None:
            if previous:
                previous.join()
            time.sleep(duration)
        thread = threading.Thread(target=work)
        thread.start()
        self.pending.append(thread)

    def synchronize(self) -> None:
        for thread in self.pending:
            thread.join()
        self.pending.clear()

    def check(self) -> Check:
        return Check(True, "none", 0.0, 0.0)


def test_timer_synchronises_before_reading_the_clock():
    measurement = measure(AsyncSleeper(0.002), TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=0.5))
    # Without synchronisation the median would be the enqueue cost (~50 us), not the work.
    assert 0.0018 < measurement.median < 0.004


def test_stable_case_converges_and_noisy_case_hits_budget_and_is_flagged():
    stable = measure(AsyncSleeper(0.001), TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=2.0,
                                                      target_rel_iqr=0.1))
    assert stable.stop_reason == "converged" and not stable.noisy
    noisy = measure(AsyncSleeper(0.001, jitter=3.0),
                    TimingConfig(warmup_s=0.01, block_min_s=0.0, budget_s=0.3, target_rel_iqr=0.001))
    assert noisy.stop_reason == "time budget" and noisy.noisy
    assert noisy.n >= 7


def test_statistics_come_from_the_raw_samples():
    m = Measurement(samples=(1.0, 2.0, 3.0, 4.0, 100.0), first_step_s=10.0, target_rel_iqr=0.05)
    assert m.median == 3.0 and m.iqr == 2.0 and m.n == 5
    assert m.noisy and m.compile_s == 7.0
    assert Measurement.from_dict(m.to_dict()) == m


class WaitingRank(AsyncSleeper):
    """Rank 0 of a pretend two-rank case whose peer is slower: at every barrier rank 0 waits
    `wait_per_block` for it, and the gathered busy times say what the peer reported."""

    def __init__(self, seconds: float, wait_per_block: float, peer_busy_factor: float) -> None:
        super().__init__(seconds)
        self.wait_per_block, self.peer_busy_factor = wait_per_block, peer_busy_factor

    def barrier(self) -> None:
        time.sleep(self.wait_per_block)

    def gather(self, value: float) -> tuple[float, ...]:
        return (value, value * self.peer_busy_factor)


def test_samples_are_barrier_to_barrier_and_rank_busy_times_expose_a_straggler():
    config = TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=0.5, target_rel_iqr=0.5)
    slow_peer = measure(WaitingRank(0.001, wait_per_block=0.01, peer_busy_factor=1.5), config)
    # the global sample includes the wait for the peer; this rank's busy time does not
    assert slow_peer.median > slow_peer.rank_medians[0] + 0.0005
    assert 0.0009 < slow_peer.rank_medians[0] < 0.002
    assert slow_peer.straggler and slow_peer.to_dict()["straggler"] is True
    even = measure(WaitingRank(0.001, wait_per_block=0.0, peer_busy_factor=1.02), config)
    assert len(even.rank_medians) == 2 and not even.straggler
    assert Measurement.from_dict(even.to_dict()) == even


def test_single_process_measurements_carry_no_rank_times():
    single = measure(AsyncSleeper(0.001), TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=0.3))
    assert single.rank_medians == () and not single.straggler


def test_under_ddp_compute_times_tell_a_straggler_that_busy_times_hide():
    # every DDP step waits in the all-reduce, so busy times are even; the no_sync times are not
    m = Measurement(samples=(0.020,) * 5, rank_medians=(0.0199, 0.0200), rank_compute=(0.010, 0.015))
    assert m.straggler and m.exchange_share == 0.25
    assert not Measurement(samples=(0.020,) * 5, rank_medians=(0.019, 0.030),
                           rank_compute=(0.010, 0.0105)).straggler
    assert Measurement.from_dict(m.to_dict()) == m and m.to_dict()["rank_compute_s"] == [0.010, 0.015]
