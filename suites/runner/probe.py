"""The rate probe: how fast this framework's GEMMs run on a device and precision here, which the
runner's bounds predict a case's first step from (`suites.runner.bounds`)."""
from __future__ import annotations

import functools

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status
from suites.runner import launchers
from suites.runner.bounds import PROBE_SIZES, PROBE_TIMING, gemm_rate, hot_cache
from suites.runner.execute import Outcome, execute_in_process
from suites.runner.plan import plan, unavailable_reason
from suites.strategies.jobs import Job


def execute_kernel(job: Job, timing: TimingConfig) -> Outcome:
    """A kernel case timed for parbench's own use (the rate probe, `calibrate`): in this process
    on a CPU, in a process of its own on a GPU or TPU, so that no framework's device state stays
    in this process (two frameworks' CUDA contexts on GPU 0 for the rest of the run) and a hang
    meets a deadline (issue 32, N5, N18)."""
    if job.case.device is DeviceKind.CPU:
        return execute_in_process(job, timing)
    return launchers.run_isolated(job, timing)


@functools.lru_cache(maxsize=None)
def probe_flops_per_s(framework: Framework, device: DeviceKind, precision: Precision) -> float | None:
    """FLOP/s of this framework's GEMMs on this device and precision here, from the fastest step
    of each `PROBE_SIZES` GEMM (`suites.runner.bounds.gemm_rate`); None where those GEMMs are
    unavailable or fail. Once per process and combination."""
    timings = [_fastest_step_s(framework, device, precision, size) for size in PROBE_SIZES]
    if None in timings:
        return None
    return gemm_rate(*timings)


def _fastest_step_s(framework: Framework, device: DeviceKind, precision: Precision,
                    size: int) -> float | None:
    probe = plan(Case.make("matmul", framework, device, precision=precision,
                           params={"m": size, "n": size, "k": size}))
    if unavailable_reason(probe):
        return None
    assert isinstance(probe, Job)
    with hot_cache():
        outcome = execute_kernel(probe, PROBE_TIMING)
    if outcome.status is not Status.OK or outcome.measurement is None:
        return None
    return min(outcome.measurement.samples)

