"""The measuring loop: warm up, then time blocks of steps until the spread is small or time is up."""
from __future__ import annotations

import contextlib
import gc
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator
from typing import Any

import numpy as np

from .measurement import Measurement
from .runnable import Runnable


@dataclass(frozen=True)
class TimingConfig:
    """How hard to try. Suites may override any field in their `[timing]` table."""

    warmup_s: float = 0.25
    min_warmup_steps: int = 3
    #: A sample spans at least this long, so clock resolution and per-call jitter don't matter.
    block_min_s: float = 0.02
    min_samples: int = 7
    min_time_s: float = 0.3
    #: Stop once IQR / median is at or below this...
    target_rel_iqr: float = 0.02
    #: ... or once this much time has been spent timing this case.
    budget_s: float = 4.0
    max_samples: int = 2000
    #: Hard limit on one out-of-process case, start-up and rendezvous included, after which its
    #: processes are killed; None derives it from the budget (`launch.case_timeout`).
    case_timeout_s: float | None = None

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> "TimingConfig":
        return cls(**values)


@dataclass(frozen=True)
class Block:
    """One timed block of steps: its time barrier to barrier, and the part of it this rank
    was busy (before it waited at the barrier for its peers)."""

    seconds: float
    busy_s: float


def _timed(runnable: Runnable, count: int, step: Callable[[], None] | None = None) -> Block:
    """`count` steps (`runnable.step` unless another is given), then sync and barrier."""
    step = step or runnable.step
    start = time.perf_counter()
    for _ in range(count):
        step()
    runnable.synchronize()
    arrived = time.perf_counter()
    runnable.barrier()
    return Block(time.perf_counter() - start, arrived - start)


#: Blocks of `local_step` timed per rank (after the main measurement) for `rank_compute`.
LOCAL_STEP_BLOCKS = 5


def _local_step_median(runnable: Runnable, block_size: int) -> float:
    """This rank's median `local_step` time: the busy part of each block (the barrier only
    keeps the ranks probing at the same time, as they step together in the real run)."""
    local_step = runnable.local_step
    assert local_step is not None
    _timed(runnable, block_size, local_step)  # a warm-up block: the first no_sync steps allocate anew
    return float(np.median([_timed(runnable, block_size, local_step).busy_s / block_size
                            for _ in range(LOCAL_STEP_BLOCKS)]))


@dataclass(frozen=True)
class WarmUp:
    """What warming up found: the first step's time and how many steps make one timed block."""

    first_step_s: float
    #: Steps run, the first one included.
    steps: int
    step_estimate_s: float
    block_size: int


def warm_up(runnable: Runnable, config: TimingConfig = TimingConfig()) -> WarmUp:
    """Run `runnable` (already set up) until warm, with the device synchronised after each step.

    Used by `measure` and by the asv / pytest-benchmark front ends, which time the steps
    themselves after the same warm-up.
    """
    agree = runnable.agree
    runnable.synchronize()
    runnable.barrier()
    first_step_s = _timed(runnable, 1).seconds

    warmup = [_timed(runnable, 1).seconds for _ in range(config.min_warmup_steps)]
    step_estimate = float(np.median(warmup))
    remaining = config.warmup_s - first_step_s - sum(warmup)
    extra = int(agree(max(0, math.ceil(remaining / max(step_estimate, 1e-9)))))
    warmup += [_timed(runnable, 1).seconds for _ in range(extra)]
    step_estimate = float(np.median(warmup[len(warmup) // 2:]))
    block_s = max(config.block_min_s, runnable.min_block_s)
    block_size = int(agree(max(1, math.ceil(block_s / max(step_estimate, 1e-9)))))
    return WarmUp(first_step_s, len(warmup) + 1, step_estimate, block_size)


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """Collect, then freeze every object that exists now, for the duration.

    The cyclic collector still runs on the steps' own garbage, but its full collections no
    longer traverse what setup, imports and the check left behind — which would make a step
    cost more in a process that imported more (a parbench worker vs a bare script). The
    objects are unfrozen afterwards, so a long run does not pile them up.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def measure(runnable: Runnable, config: TimingConfig = TimingConfig()) -> Measurement:
    """Time `runnable` (already set up). The device is synchronised before every clock read.

    Every decision that changes the number of steps goes through `runnable.agree`, so the
    ranks of a multi-process case take identical decisions (rank 0's). Samples are global
    (barrier to barrier); each rank's busy time per step (before it waits for its peers) is
    gathered into `rank_medians`, where a straggler shows.
    """
    with settled_heap():
        return _measure(runnable, config)


def _measure(runnable: Runnable, config: TimingConfig) -> Measurement:
    agree = runnable.agree
    warm = warm_up(runnable, config)
    block_size = warm.block_size

    samples: list[float] = []
    busy: list[float] = []
    stop_reason = "max samples"
    start = time.perf_counter()
    while len(samples) < config.max_samples:
        block = _timed(runnable, block_size)
        samples.append(block.seconds / block_size)
        busy.append(block.busy_s / block_size)
        elapsed = time.perf_counter() - start
        reason = ""
        if len(samples) >= config.min_samples and elapsed >= config.min_time_s:
            q1, median, q3 = np.percentile(samples, [25, 50, 75])
            if (q3 - q1) <= config.target_rel_iqr * median:
                reason = "converged"
        if not reason and elapsed >= config.budget_s and len(samples) >= 3:
            reason = "time budget"
        decision = agree({"": 0.0, "converged": 1.0, "time budget": 2.0}[reason])
        if decision:
            stop_reason = "converged" if decision == 1.0 else "time budget"
            break
    rank_medians = runnable.gather(float(np.median(busy)))
    rank_compute: tuple[float, ...] = ()
    if runnable.local_step is not None:
        rank_compute = runnable.gather(_local_step_median(runnable, block_size))
    return Measurement(samples=tuple(samples), block_size=block_size, warmup_steps=warm.steps,
                       first_step_s=warm.first_step_s, target_rel_iqr=config.target_rel_iqr,
                       stop_reason=stop_reason,
                       rank_medians=rank_medians if len(rank_medians) > 1 else (),
                       rank_compute=rank_compute if len(rank_compute) > 1 else ())
