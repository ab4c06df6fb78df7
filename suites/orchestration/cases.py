"""The run layer's entry points for a case: each resolves the case into its job (cached) and
calls the run layer, which takes jobs. Front ends, tools and tests ask here."""
from __future__ import annotations

import functools

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, DeviceKind, Framework, Precision, Status
from suites.hardware.devices import framework_installed, not_installed_reason
from suites.records.contention import Contention
from suites.records.record import Record
from suites.run import availability, execute, launchers
from suites.run.bounds import PROBE_SIZES, PROBE_TIMING, Bound, bound_for as job_bound, gemm_rate, hot_cache
from suites.run.eta import COMPILE_OVERHEAD_S, IN_PROCESS_OVERHEAD_S, LAUNCH_OVERHEAD_S, steps_estimate_s
from suites.run.execute import Outcome
from suites.run.launch import Launch
from suites.run.recording import RunContext
from suites.run.recording import store_outcome as store_job_outcome
from suites.strategies.jobs import job_for
from suites.strategies.registry import NoSuchStrategy

#: The module a launcher starts, `python -m WORKER`, for each process of a case run out of
#: this one (`parbench worker` is the same entry point under the name users start it by).
WORKER = "suites.orchestration.case_process"


def unavailable_reason(case: Case) -> str | None:
    """Why `case` cannot run here, or None: its framework not installed, no plugin of its
    framework for its strategy, else the run layer's reasons for its job
    (`suites.run.availability`)."""
    if not framework_installed(case.framework):
        return not_installed_reason(case.framework)
    try:
        job = job_for(case)
    except NoSuchStrategy as error:
        return str(error)
    return availability.unavailable_reason(job)


def execute_in_process(case: Case, timing: TimingConfig) -> Outcome:
    """Run an available `case` in this process (`suites.run.execute.execute_in_process`)."""
    return execute.execute_in_process(job_for(case), timing)


def execute_kernel(case: Case, timing: TimingConfig) -> Outcome:
    """A kernel case timed for parbench's own use (the rate probe, `calibrate`): in this process
    on a CPU, in a process of its own on a GPU or TPU, so that no framework's device state stays
    in this process (two frameworks' CUDA contexts on GPU 0 for the rest of the run) and a hang
    meets a deadline (issue 32, N5, N18)."""
    if case.device is DeviceKind.CPU:
        return execute_in_process(case, timing)
    return launchers.run_isolated(job_for(case), timing, WORKER)


@functools.lru_cache(maxsize=None)
def probe_flops_per_s(framework: Framework, device: DeviceKind, precision: Precision) -> float | None:
    """FLOP/s of this framework's GEMMs on this device and precision here, from the fastest step
    of each `PROBE_SIZES` GEMM (`suites.run.bounds.gemm_rate`), timed in this process on a CPU
    and in a process of its own on a GPU or TPU (so that no framework's device state stays in
    the parbench process: issue 32, N5); None where those GEMMs are unavailable or fail. Once
    per process and combination."""
    timings = [_fastest_step_s(framework, device, precision, size) for size in PROBE_SIZES]
    if None in timings:
        return None
    return gemm_rate(*timings)


def _fastest_step_s(framework: Framework, device: DeviceKind, precision: Precision,
                    size: int) -> float | None:
    probe = Case.make("matmul", framework, device, precision=precision, params={"m": size, "n": size, "k": size})
    if unavailable_reason(probe):
        return None
    with hot_cache():
        outcome = execute_kernel(probe, PROBE_TIMING)
    if outcome.status is not Status.OK or outcome.measurement is None:
        return None
    return min(outcome.measurement.samples)


def bound_for(case: Case, timing: TimingConfig) -> Bound:
    """How an available `case` is kept inside its first-step limit (`suites.run.bounds`)."""
    return job_bound(job_for(case), timing, probe_flops_per_s)


def case_timeout(timing: TimingConfig, case: Case | None = None) -> float:
    """How long a launcher lets `case` (or any case, without one) run (`suites.run.launchers`)."""
    return launchers.case_timeout(timing, job_for(case) if case is not None else None)


def launch_mode(case: Case) -> Launch:
    return launchers.launch_mode(job_for(case))


def launch_case(case: Case, timing: TimingConfig) -> Outcome:
    """Run an available `case` the way its strategy says (`suites.run.launchers.launch_case`),
    out of process in `WORKER` processes."""
    return launchers.launch_case(job_for(case), timing, probe_flops_per_s, WORKER)


def run_ranks(case: Case, timing: TimingConfig) -> Outcome:
    """`case` as its strategy's rank processes (`suites.run.launchers.run_ranks`)."""
    return launchers.run_ranks(job_for(case), timing, WORKER)


def rank_cpus(case: Case, processes: int) -> list[list[int]] | None:
    return launchers.rank_cpus(job_for(case), processes)


def store_outcome(case: Case, outcome: Outcome, context: RunContext,
                  contention: Contention | None = None) -> Record:
    """Store what running `case` produced, with provenance and derived metrics
    (`suites.run.recording.store_outcome`)."""
    return store_job_outcome(job_for(case), outcome, context, contention)


def case_estimate_s(case: Case, timing: TimingConfig) -> float:
    """Expected seconds for `case`: nothing if it is unavailable here or refused as too slow
    (`suites.run.bounds`), else its steps (`suites.run.eta.steps_estimate_s`) plus set-up or
    launch, and a compiled case's compiles; a case run where it can be stopped, at most its
    deadline."""
    if unavailable_reason(case):
        return 0.0
    bound = bound_for(case, timing)
    if bound.refused:
        return 0.0
    launched = launch_mode(case) is not Launch.IN_PROCESS or bound.isolated
    compiles = COMPILE_OVERHEAD_S if case.compile is not Compile.NONE else 0.0
    total = (steps_estimate_s(timing, bound.predicted_step_s) + compiles
             + (LAUNCH_OVERHEAD_S if launched else IN_PROCESS_OVERHEAD_S))
    return min(total, case_timeout(timing, case)) if bound.isolated else total
