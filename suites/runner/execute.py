"""Run one available case in this process: set up, check numerics, time. Framework-neutral."""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.records.check import Check
from suites.records.measurement import Measurement
from suites.records.peak_memory import largest_peak
from suites.measure.runnable import Runnable
from suites.measure.timing import KeepsRecompiling, TooSlow, measure
from suites.measure.unsupported import Unsupported
from suites.strategies.jobs import Job


@dataclass
class Outcome:
    """What running a case produced, before provenance and derived metrics are attached."""

    status: Status
    reason: str = ""
    measurement: Measurement | None = None
    check: Check | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"status": str(self.status), "reason": self.reason,
                "measurement": self.measurement.to_dict() if self.measurement else None,
                "check": self.check.to_dict() if self.check else None, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Outcome":
        return cls(Status(data["status"]), data.get("reason", ""),
                   Measurement.from_dict(data["measurement"]) if data.get("measurement") else None,
                   Check.from_dict(data["check"]) if data.get("check") else None,
                   data.get("details") or {})


#: Key of a failed outcome's details: when the error happened (seconds since the epoch). Of
#: several ranks that failed, the launcher blames the first (`suites.runner.launchers`).
FAILED_AT = "failed_at"


def failed(error: BaseException, where: str) -> Outcome:
    summary = f"{where}: {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return Outcome(Status.FAILED, summary[:500],
                   details={"traceback_tail": traceback.format_exc().splitlines()[-12:],
                            FAILED_AT: time.time()})


def unsupported_errors(runnable_class: type) -> tuple[type[BaseException], ...]:
    """The exceptions that mean "no kernel for this combination here": unavailable, not failed."""
    return (Unsupported, *getattr(runnable_class, "unsupported_errors", ()))


def unsupported_reason(error: BaseException) -> str:
    """The error's first line; for one raised while TF traced a function, whose message begins
    "in user code:" and lists the frames, its last line: the error itself."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = (lines[-1] if lines[0] == "in user code:" else lines[0]) if lines else type(error).__name__
    return f"not supported here: {message}"[:500]


def measured_check(runnable: Runnable) -> Check:
    """The runnable's numerics check, with its wall time and the most memory it held beyond what
    its process (or busiest GPU) held when it began: this rank's, rank 0's in a record (the
    rank that computes the reference)."""
    probe = runnable.memory_probe()
    held = None
    if probe is not None:
        probe.start()
        held = largest_peak(probe.stop())  # a peak read at once: what is held now
        probe.start()
    start = time.perf_counter()
    check = runnable.check()
    seconds = time.perf_counter() - start
    peak = largest_peak(probe.stop()) if probe is not None else None
    if probe is not None:
        probe.release_cached()  # the timed steps' peak is theirs, not the check's cache
    added = None if peak is None or held is None else max(0, peak - held)
    return replace(check, check_s=seconds, memory_bytes=added)


def execute_in_process(job: Job, timing: TimingConfig) -> Outcome:
    """Set up the job's runnable, check its numerics, time it: the outcome (never raises for
    what the case does)."""
    runnable_class = job.runnable_class
    unsupported = unsupported_errors(runnable_class)
    stage = "setup"
    runnable = runnable_class(job)
    try:
        runnable.setup()
        stage = "check"
        check = measured_check(runnable)
        stage = "timing"
        measurement = measure(runnable, timing)
    except unsupported as error:
        return Outcome(Status.UNAVAILABLE, unsupported_reason(error))
    except TooSlow as error:
        return Outcome(Status.UNAVAILABLE, str(error), check=check)
    except KeepsRecompiling as error:
        return Outcome(Status.FAILED, str(error), check=check, details=dict(runnable.details))
    except Exception as error:  # a case that crashes is a failed case; the suite goes on
        return failed(error, stage)
    finally:
        runnable.teardown()
    if not check.passed and check.checked:  # a check left undone (`not_checked`) fails nothing: it says so
        return Outcome(Status.FAILED, f"numerics check failed: {check}", measurement, check,
                       dict(runnable.details))
    return Outcome(Status.OK, "", measurement, check, dict(runnable.details))
