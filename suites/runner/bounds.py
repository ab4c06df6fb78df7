"""Bounded cases: a case that cannot finish inside its limit is refused or stopped at it.

The timer judges a first step too slow only once it returns (`suites.measure.timing.TooSlow`), and a
case timed in the parbench process cannot be stopped while a step runs (a bf16 GEMM without a
fast path on an AVX2 CPU: 483 s a step, 16 minutes for its check and first step). So before a
case runs, its first step is predicted from its analytic FLOPs and the rate small GEMMs of the
same framework, device and precision run at here (one probe per process and combination, timed by
the caller: `suites.runner.probe.probe_flops_per_s`):

- predicted over `REFUSE_FACTOR` x its first-step limit: refused up front, `unavailable`
  ("too slow here: predicted ..."), nothing run (the issue's case: 8 x);
- predicted over `ISOLATE_SHARE` of the limit: run in an isolated process, stopped (SIGTERM,
  then SIGKILL) at its deadline and recorded `unavailable` with that reason;
- else, or without a FLOP count or a probe: timed as its strategy says.

CPU cases only: a GPU or TPU runs a step far inside any limit, and its probe would cost two worker
start-ups per precision (a process of its own each, `suites.runner.probe.execute_kernel`) that
time nothing (issue 48): its cases are timed as their strategies say, without a prediction.

Small GEMMs run slower per FLOP than a big one and a training step slower than a GEMM, so
the prediction is a rough one: that is why only a case far over its limit is refused, and one
near it is run where it can be stopped.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, DeviceKind, Framework, Precision
from suites.measure.timing import first_step_limit_s
from suites.measure.process_env import env_set
from suites.workloads.kernels import ROTATION_ENV
from suites.strategies.jobs import Job

#: The probe: square GEMMs of these sizes (34 and 268 MFLOP), each timed briefly on one copy of
#: its inputs (`hot_cache`). Two sizes, because a small GEMM's step is mostly a fixed cost on a
#: busy machine (torch fp32 at 256^3: ~20 ms a call at load 9 on a 2-core VM, whose 2048^3 GEMM
#: ran at ~50 GFLOP/s: its threads wait to be scheduled): the rate is the difference's.
PROBE_SIZES = (256, 512)
PROBE_TIMING = TimingConfig(warmup_s=0.0, min_warmup_steps=1, block_min_s=0.0, min_samples=5,
                            min_time_s=0.0, target_rel_iqr=1.0, budget_s=0.2)
#: The difference's rate is trusted up to this multiple of the larger GEMM's own rate (a lower
#: bound of the true one), so that noise in two short timings cannot predict a slow case fast.
MAX_RATE_GAIN = 8.0
#: A step of fewer FLOPs is not predicted (no probe is run for it): at the slowest rate seen
#: (bf16 on an AVX2 CPU, ~0.3 GFLOP/s) it takes a few seconds, far inside any limit.
PREDICTED_FROM_FLOPS = 1e9
#: A case predicted over this share of its first-step limit runs where it can be stopped.
ISOLATE_SHARE = 0.25
#: A case predicted over this multiple of its first-step limit is refused without running. The
#: probe's rate can read several times too low on a busy machine: a case predicted near its
#: limit is run where it can be stopped instead.
REFUSE_FACTOR = 4.0


@dataclass(frozen=True)
class Bound:
    """How a case is kept inside its limit."""

    #: The predicted first step, seconds (None: not predicted).
    predicted_step_s: float | None = None
    #: Why the case is refused without running ('' when it runs).
    refused: str = ""
    #: Whether it runs in an isolated process, stopped at its deadline.
    isolated: bool = False


def gemm_rate(small_s: float, large_s: float) -> float:
    """FLOP/s from the fastest steps of the two `PROBE_SIZES` GEMMs (the least disturbed by
    other work): the rate of the extra work of the larger one over the smaller, at most
    `MAX_RATE_GAIN` x the larger one's own rate, and at least that."""
    small, large = (2.0 * size**3 for size in PROBE_SIZES)
    own_rate = large / large_s
    if large_s <= small_s:
        return own_rate
    return min(max((large - small) / (large_s - small_s), own_rate), MAX_RATE_GAIN * own_rate)


#: The FLOP/s of a framework's GEMMs on a device and precision here, or None where they cannot
#: be timed (`suites.runner.probe.probe_flops_per_s`, which resolves and times the
#: probe's cases: this layer takes jobs, it does not build them).
Probe = Callable[[Framework, DeviceKind, Precision], "float | None"]


@contextlib.contextmanager
def hot_cache() -> Iterator[None]:
    """Kernels set up in here use one copy of their inputs: a small GEMM's inputs rotated
    through a large cache are thousands of copies, and drawing them took minutes (bf16 on a
    busy 2-core VM), where the probe needs a rough rate in a second."""
    with env_set(ROTATION_ENV, "0"):
        yield


def predicted_step_s(job: Job, probe: Probe) -> float | None:
    """One step of an available CPU case, predicted from its FLOPs at the `probe`'s rate
    (devices emulated on one CPU share it); None for a GPU or TPU case (no probe is run)."""
    if job.device is not DeviceKind.CPU:
        return None
    try:
        flops = job.workload.flops_per_step()
    except (KeyError, ValueError):  # a workload or model not registered in this process
        return None
    if not flops or flops < PREDICTED_FROM_FLOPS:
        return None
    rate = probe(job.framework, job.device, job.precision)
    if not rate:
        return None
    return flops / rate


def bound_for(job: Job, timing: TimingConfig, probe: Probe) -> Bound:
    """How the job's case (available here) is kept inside its first-step limit."""
    step_s = predicted_step_s(job, probe)
    if step_s is None:
        return Bound()
    limit = first_step_limit_s(timing, compiled=job.compiler.compile is not Compile.NONE)
    if step_s > REFUSE_FACTOR * limit:
        return Bound(step_s, refused=(
            f"too slow here: predicted first step {step_s:.3g} s (its FLOPs at the rate "
            f"{job.precision} GEMMs ran here), over {REFUSE_FACTOR:g} x the {limit:.3g} s "
            f"a first step may take; not run (raise the budget to time it)"))
    return Bound(step_s, isolated=step_s > ISOLATE_SHARE * limit)
