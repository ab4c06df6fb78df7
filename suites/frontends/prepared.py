"""A case made ready for a front end that times its steps itself (asv, pytest-benchmark).

The same stages as `suites.runner.execute.execute_in_process`, stopping before the timing loop:
availability, set-up, numerics check, then the core's warm-up with the device synchronised.
"""
from __future__ import annotations

from dataclasses import dataclass

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Framework
from suites.records.check import Check
from suites.runner.plan import plan, unavailable_reason
from suites.runner.execute import measured_check, unsupported_errors, unsupported_reason
from suites.measure.launch import Launch
from suites.measure.runnable import Runnable
from suites.measure.timing import TooSlow, WarmUp, warm_up
from suites.strategies.jobs import job_for


class CaseUnavailable(NotImplementedError):
    """The case cannot run here; the message says why.

    A NotImplementedError, because that is how an asv benchmark's setup says "skip me"
    (asv then shows n/a); pytest front ends turn it into `pytest.skip`.
    """


class NumericsFailed(AssertionError):
    """The case computed the wrong thing: a failed case, however fast."""

    def __init__(self, case: Case, check: Check) -> None:
        super().__init__(f"{case.id}: numerics check failed: {check}")
        self.check = check


def runs_in_process(case: Case) -> bool:
    """Whether the case's strategy is timed in the calling process (not in launched ranks)."""
    return job_for(case).strategy.rules.launch is Launch.IN_PROCESS


@dataclass
class PreparedCase:
    case: Case
    runnable: Runnable
    check: Check
    warmup: WarmUp

    def step_and_synchronize(self) -> None:
        """One step, finished on the device: what a front end's timer may time."""
        self.runnable.step()
        self.runnable.synchronize()
        self.runnable.barrier()

    def close(self) -> None:
        self.runnable.teardown()


#: The framework whose GPU cases this process has timed: its CUDA context (and TensorFlow's
#: claim on the whole GPU memory) stays for the life of the process.
_GPU_FRAMEWORK: list[Framework] = []


def other_framework_on_gpu_reason(case: Case) -> str | None:
    """Why a GPU case of one framework cannot be timed in a process that has timed the other's
    (issue 32, N6: TF keeps the GPU's memory it took and both CUDA contexts would compete, so
    the second framework's figures were not its own), else None; notes the first."""
    if case.device is not DeviceKind.GPU:
        return None
    if not _GPU_FRAMEWORK:
        _GPU_FRAMEWORK.append(case.framework)
        return None
    first = _GPU_FRAMEWORK[0]
    if case.framework is first:
        return None
    return (f"this process already timed {first} on the GPU, whose CUDA context and memory stay with it; "
            f"time {case.framework} GPU cases in a session of their own (e.g. pytest -k {case.framework.value}) "
            f"or with parbench run, which gives each GPU case its own process")


def prepare(case: Case, timing: TimingConfig) -> PreparedCase:
    """Set up, check and warm up `case` in this process.

    Raises CaseUnavailable (not here, or a multi-process strategy, which a front end must run
    through `suites.runner.runner.Runner.launch` instead) or NumericsFailed.
    """
    reason = unavailable_reason(plan(case)) or other_framework_on_gpu_reason(case)
    if reason:
        raise CaseUnavailable(reason)
    if not runs_in_process(case):
        raise CaseUnavailable(f"strategy {case.strategy} runs in its own processes "
                              f"({job_for(case).strategy.rules.launch.value}); it cannot be timed in this one")
    runnable = job_for(case).runnable()
    try:
        runnable.setup()
        check = measured_check(runnable)
        if not check.passed and check.checked:
            raise NumericsFailed(case, check)
        warm = warm_up(runnable, timing)
    except unsupported_errors(type(runnable)) as error:
        runnable.teardown()
        raise CaseUnavailable(unsupported_reason(error)) from error
    except TooSlow as error:
        runnable.teardown()
        raise CaseUnavailable(str(error)) from error
    except BaseException:
        runnable.teardown()
        raise
    return PreparedCase(case, runnable, check, warm)
