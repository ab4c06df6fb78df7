"""The measuring loop: warm up, then time blocks of steps until the spread is small or time is up."""
from __future__ import annotations

import contextlib
import gc
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from suites.cases.timing_config import TimingConfig
from suites.records.measurement import OUT_OF_TIME, Measurement
from suites.measure.cpu_meter import CpuMeter, case_meter
from suites.measure.instruments import Instruments
from suites.measure.runnable import Runnable


@dataclass(frozen=True)
class Block:
    """One timed block of steps: its time barrier to barrier, and the part of it this rank
    was busy (before it waited at the barrier for its peers)."""

    seconds: float
    busy_s: float


#: Reads seconds from a monotonic clock. `time.perf_counter` everywhere but in tests, which
#: pass a controlled clock so the timer's decisions can be asserted on any machine.
Clock = Callable[[], float]


def _timed(runnable: Runnable, count: int, clock: Clock,
           step: Callable[[], None] | None = None) -> Block:
    """`count` steps (`runnable.step` unless another is given), then sync and barrier."""
    step = step or runnable.step
    start = clock()
    for _ in range(count):
        step()
    runnable.synchronize()
    arrived = clock()
    runnable.barrier()
    return Block(clock() - start, arrived - start)


#: Blocks of `local_step` timed per rank (after the main measurement) for `rank_compute`.
LOCAL_STEP_BLOCKS = 5


def _local_step_median(runnable: Runnable, block_size: int, clock: Clock) -> float:
    """This rank's median `local_step` time: the busy part of each block (the barrier only
    keeps the ranks probing at the same time, as they step together in the real run)."""
    local_step = runnable.local_step
    assert local_step is not None
    _timed(runnable, block_size, clock, local_step)  # a warm-up block: the first no_sync steps allocate anew
    return float(np.median([_timed(runnable, block_size, clock, local_step).busy_s / block_size
                            for _ in range(LOCAL_STEP_BLOCKS)]))


#: The fewest samples a case that ran out of budget is stored with.
MIN_BUDGET_SAMPLES = 3

#: The first step compiles, traces or autotunes: it may take this long (or the case limit, if
#: that is longer) before the case is judged too slow to time.
FIRST_STEP_ALLOWANCE_S = 60.0
#: The same for a compiled case, whose first step compiles cold: torch.compile of a small
#: model took 10-50 s on a loaded 2-core VM, max-autotune benchmarks kernels for minutes.
COMPILED_FIRST_STEP_ALLOWANCE_S = 300.0


class TooSlow(Exception):
    """The first step alone took longer than the case may: no sample can be taken in time."""

    def __init__(self, first_step_s: float, limit_s: float) -> None:
        super().__init__(f"too slow here: first step {first_step_s:.3g} s, over the {limit_s:.3g} s a first "
                         f"step may take (compilation included); raise the budget to time it")


#: A compiled case is warm once this many steps in a row compiled nothing.
STABLE_STEPS = 3
#: Compilations after the first step's beyond which a compiled case keeps recompiling.
MAX_RECOMPILES = 8
#: Steps spent waiting for compilations to stop beyond which a case keeps recompiling.
MAX_SETTLING_STEPS = 100


class KeepsRecompiling(Exception):
    """A compiled case whose step kept being compiled anew: its steps never settle, so no
    step time of it means anything. The case fails with this reason."""

    def __init__(self, recompiles: int, steps: int, during: str = "warm-up") -> None:
        super().__init__(f"keeps recompiling: {recompiles} compilation(s) after the first step's over {steps} "
                         f"{during} step(s) (a warm case compiles nothing after its first step; at most "
                         f"{MAX_RECOMPILES} recompiles while warming up)")


@dataclass(frozen=True)
class WarmUp:
    """What warming up found: the first step's time and how many steps make one timed block."""

    first_step_s: float
    #: Steps run, the first one included.
    steps: int
    step_estimate_s: float
    block_size: int
    #: The warm steps' own times, in order (each synchronised): where a slow case has no
    #: time left for timed blocks, these are the samples it is stored with.
    warm_steps_s: tuple[float, ...] = ()
    #: The case's first steps showed that the minimum timed samples would not fit in its limit.
    out_of_time: bool = False
    #: A compiled case: compilations after the first step's, while warming up (None: not compiled).
    recompiles: int | None = None
    #: A compiled case: its compiler's count of compilations when warm-up ended.
    compilations: int | None = None


def case_limit_s(config: TimingConfig) -> float:
    """How long one case's steps after the first may take, warm-up included, before it is cut short;
    at most the case's own deadline (`case_timeout_s`)."""
    return _within_deadline(config, 5 * config.budget_s + config.warmup_s)


def first_step_limit_s(config: TimingConfig, compiled: bool = False) -> float:
    """How long the first step (compilation included) may take before the case is too slow; at most
    the case's own deadline (`case_timeout_s`)."""
    allowance = COMPILED_FIRST_STEP_ALLOWANCE_S if compiled else FIRST_STEP_ALLOWANCE_S
    return _within_deadline(config, max(allowance, case_limit_s(config)))


def _within_deadline(config: TimingConfig, limit_s: float) -> float:
    """`limit_s`, cut to `case_timeout_s` where that is set: a case timed in this process, where no
    launcher stops it, keeps its deadline between steps (a launched one is stopped at it anyway)."""
    return limit_s if config.case_timeout_s is None else min(limit_s, config.case_timeout_s)


#: Seconds a case's processes get to start (framework import, rendezvous) before its first step,
#: where its strategy says no other (`suites.strategies.rules.Rules.startup_allowance_s`).
STARTUP_ALLOWANCE_S = 120.0


def case_deadline_s(config: TimingConfig, startup_s: float = STARTUP_ALLOWANCE_S, compiled: bool = False) -> float:
    """How long a case may run before its processes are stopped: `config.case_timeout_s` if set,
    else start-up, the longest the timer lets a case take (its first step, then `case_limit_s`),
    and one more budget for the check and per-rank probes. A compiled case compiles twice (its
    check, then its first step cold): it gets a compiled first step's limit and that much again."""
    if config.case_timeout_s is not None:
        return config.case_timeout_s
    return (startup_s + first_step_limit_s(config, compiled) + case_limit_s(config) + config.budget_s
            + (COMPILED_FIRST_STEP_ALLOWANCE_S if compiled else 0.0))


def warm_up(runnable: Runnable, config: TimingConfig = TimingConfig(),
            clock: Clock = time.perf_counter, instruments: Instruments | None = None) -> WarmUp:
    """Run `runnable` (already set up) until warm, with the device synchronised after each step.

    Warm-up lasts `warmup_s` and at least `min_warmup_steps` steps after the first — unless
    the steps are so slow that `MIN_BUDGET_SAMPLES` timed steps after them would overrun
    `case_limit_s` (counted after the first step, whose compilation is no step's cost): then it
    stops early (`out_of_time`). A first step over `first_step_limit_s` raises `TooSlow`.
    The `instruments` that cover the warm-up (`Instrument.covers_warm_up`: the memory probe, the
    CPU meter) are started after the first step, whose compilation is no step's, so the warm
    steps a cut-short case is stored with have their figures too.
    A compiled case's compiled step is forgotten first (`compile_anew`: the check compiled
    it), so the first step's time holds the compilation; its warm-up lasts until
    `STABLE_STEPS` steps in a row compiled nothing (`_until_compiles_stop`).
    Used by `measure` and by the asv / pytest-benchmark front ends, which time the steps
    themselves after the same warm-up.
    """
    agree = runnable.agree
    limit = case_limit_s(config)
    runnable.compile_anew()
    runnable.synchronize()
    runnable.barrier()
    first_limit = first_step_limit_s(config, compiled=runnable.compilations() is not None)
    first_step_s = _timed(runnable, 1, clock).seconds
    first_compilations = runnable.compilations()
    if agree(float(first_step_s > first_limit)):
        raise TooSlow(first_step_s, first_limit)
    if instruments is not None:
        instruments.start(warm_up=True)
    warm = [_timed(runnable, 1, clock).seconds]  # the first step's time may be mostly compilation
    while True:
        spent = sum(warm)
        estimate = float(np.median(warm[len(warm) // 2:]))
        wanted = max(config.min_warmup_steps - len(warm),
                     math.ceil((config.warmup_s - first_step_s - spent) / max(estimate, 1e-9)), 0)
        affordable = math.floor((limit - spent) / max(estimate, 1e-9)) - MIN_BUDGET_SAMPLES
        out_of_time = affordable < 0  # not even the fewest timed samples fit any more
        steps = int(agree(max(0, min(wanted, affordable))))
        if not steps:
            break
        warm += [_timed(runnable, 1, clock).seconds for _ in range(steps)]
    compilations = None
    if first_compilations is not None:
        compilations = _until_compiles_stop(runnable, clock, warm, first_compilations)
    step_estimate = float(np.median(warm[len(warm) // 2:]))
    block_s = max(config.block_min_s, runnable.min_block_s)
    block_size = int(agree(max(1, math.ceil(block_s / max(step_estimate, 1e-9)))))
    return WarmUp(first_step_s, len(warm) + 1, step_estimate, block_size, tuple(warm),
                  bool(agree(float(out_of_time))),
                  None if compilations is None else compilations - first_compilations, compilations)


def _until_compiles_stop(runnable: Runnable, clock: Clock, warm: list[float], first: int) -> int:
    """Warm steps (appended to `warm`) until `STABLE_STEPS` in a row compiled nothing; the
    compiler's count then. Raises KeepsRecompiling past `MAX_RECOMPILES` recompiles or
    `MAX_SETTLING_STEPS` steps. The warm-up loop's steps count: a case that compiled nothing
    since its first step is settled at once. Decisions are rank 0's (`agree`)."""
    count, stable, settling = runnable.compilations(), 0, 0
    assert count is not None
    if count == first:
        stable = len(warm)
    while not runnable.agree(float(stable >= STABLE_STEPS)):
        if runnable.agree(float(count - first > MAX_RECOMPILES or settling >= MAX_SETTLING_STEPS)):
            raise KeepsRecompiling(count - first, len(warm))
        warm.append(_timed(runnable, 1, clock).seconds)
        settling += 1
        now = runnable.compilations()
        assert now is not None
        stable = stable + 1 if now == count else 0
        count = now
    return count


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


def measure(runnable: Runnable, config: TimingConfig = TimingConfig(),
            clock: Clock = time.perf_counter, cpu_meter: CpuMeter | None = None) -> Measurement:
    """Time `runnable` (already set up). The device is synchronised before every clock read.

    Every decision that changes the number of steps goes through `runnable.agree`, so the
    ranks of a multi-process case take identical decisions (rank 0's). Samples are global
    (barrier to barrier); each rank's busy time per step (before it waits for its peers) is
    gathered into `rank_medians`, where a straggler shows.

    The runnable's instruments (`suites.measure.instruments`) read the timed blocks (a case cut
    short: its warm steps), each rank's gathered to rank 0: its memory probe (`memory`, and
    `memory_breakdown` from one more, untimed step under the framework's memory tracker), its
    energy meter (`energy`; over untimed blocks of the same step too where the timed blocks were
    shorter than its counter needs), its telemetry sampler (`telemetry`, with the kernel time per
    step over one more block), and a `cpu_meter` (default: this case's process tree and cores,
    `suites.measure.cpu_meter.CpuMeter`): the CPU time the case and everyone else took (`cpu`, from
    which the record's contention is judged; the record keeps rank 0's, whose tree holds every
    rank where one launcher started them all).
    """
    instruments = Instruments((runnable.memory_probe(), runnable.energy_meter(), runnable.telemetry_sampler(),
                               cpu_meter or case_meter()))
    with settled_heap(), instruments.stopped_on_error():
        return _measure(runnable, config, clock, instruments)


def _measure(runnable: Runnable, config: TimingConfig, clock: Clock, instruments: Instruments) -> Measurement:
    agree = runnable.agree
    warm = warm_up(runnable, config, clock, instruments)
    if warm.out_of_time:
        instruments.stop(len(warm.warm_steps_s))
        return Measurement(samples=warm.warm_steps_s, block_size=1, warmup_steps=1,
                           first_step_s=warm.first_step_s, target_rel_iqr=config.target_rel_iqr,
                           stop_reason=OUT_OF_TIME, timed_s=sum(warm.warm_steps_s), recompiles=warm.recompiles,
                           **instruments.record(runnable, 1, cut_short=True))
    block_size = warm.block_size
    instruments.start()  # anew: the timed blocks alone

    samples: list[float] = []
    busy: list[float] = []
    stop_reason = "max samples"
    start = clock()
    while len(samples) < config.max_samples:
        block = _timed(runnable, block_size, clock)
        samples.append(block.seconds / block_size)
        busy.append(block.busy_s / block_size)
        elapsed = clock() - start
        reason = ""
        if len(samples) >= config.min_samples and elapsed >= config.min_time_s:
            q1, median, q3 = np.percentile(samples, [25, 50, 75])
            if (q3 - q1) <= config.target_rel_iqr * median:
                reason = "converged"
        if not reason and elapsed >= config.budget_s and len(samples) >= MIN_BUDGET_SAMPLES:
            reason = "time budget"
        decision = agree({"": 0.0, "converged": 1.0, "time budget": 2.0}[reason])
        if decision:
            stop_reason = "converged" if decision == 1.0 else "time budget"
            break
    timed_s = clock() - start
    steps = len(samples) * block_size
    instruments.stop(steps, timed_s)
    instruments.stop(steps + _top_up(runnable, instruments, block_size, clock, start, config.budget_s))
    if warm.compilations is not None:
        during = runnable.compilations()
        assert during is not None
        if agree(float(during != warm.compilations)):
            raise KeepsRecompiling(during - warm.compilations, steps, "timed")
    fields = instruments.record(runnable, block_size)
    rank_medians = runnable.gather(float(np.median(busy)))
    rank_compute: tuple[float, ...] = ()
    if runnable.local_step is not None:
        rank_compute = runnable.gather(_local_step_median(runnable, block_size, clock))
    return Measurement(samples=tuple(samples), block_size=block_size, warmup_steps=warm.steps,
                       first_step_s=warm.first_step_s, target_rel_iqr=config.target_rel_iqr,
                       stop_reason=stop_reason, timed_s=timed_s,
                       rank_medians=rank_medians if len(rank_medians) > 1 else (),
                       rank_compute=rank_compute if len(rank_compute) > 1 else (),
                       recompiles=warm.recompiles, **fields)


def _top_up(runnable: Runnable, instruments: Instruments, block_size: int, clock: Clock, start: float,
            limit_s: float) -> int:
    """Untimed blocks of the same step while an instrument still reading wants a longer window
    than the timed blocks gave it (on any rank: `Instruments.wanted_s`, the longest gathered), at
    most `limit_s` more: the steps they ran. An energy counter updated every 100 ms reads a 0.3 s
    window up to a third off; its window is made long enough instead. Rank 0 decides."""
    wanted = max(runnable.gather(instruments.wanted_s()))
    steps, until = 0, min(start + wanted, clock() + limit_s)
    while runnable.agree(float(clock() < until)):
        _timed(runnable, block_size, clock)
        steps += block_size
    return steps
