"""A case planned for this machine: resolved once into its job (`suites.strategies.jobs.job_for`),
or, where it resolves into none here, kept with the reason. Everything below the runner takes the
job; a front end turns its grid's cases into plans and hands them to the runner."""
from __future__ import annotations

from dataclasses import dataclass

from suites.cases.case import Case
from suites.hardware.devices import framework_installed, not_installed_reason
from suites.runner import availability
from suites.strategies.jobs import Job, job_for
from suites.strategies.registry import NoSuchStrategy


@dataclass(frozen=True)
class Unresolved:
    """A case that resolves into no job here: its framework is not installed, or that framework
    has no plugin for its strategy. It is recorded `unavailable` with the reason."""

    case: Case
    reason: str


#: What the runner takes: a job, or a case that has none here.
Plan = Job | Unresolved


def plan(case: Case) -> Plan:
    """The job of `case` (cached per case: `job_for`), or why it has none here."""
    if not framework_installed(case.framework):
        return Unresolved(case, not_installed_reason(case.framework))
    try:
        return job_for(case)
    except NoSuchStrategy as error:
        return Unresolved(case, str(error))


def unavailable_reason(planned: Plan) -> str | None:
    """Why the planned case cannot run here, or None: it has no job here, or the run layer's
    reasons for its job (`suites.runner.availability.unavailable_reason`)."""
    if isinstance(planned, Unresolved):
        return planned.reason
    return availability.unavailable_reason(planned)
