"""A case planned for this machine: resolved once into its job (`suites.strategies.jobs.job_for`),
or, where it resolves into none here, kept with the reason. Everything below the runner takes the
job; a front end turns its grid's cases into plans and hands them to the runner."""
from __future__ import annotations

from dataclasses import dataclass

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind
from suites.frameworks.implementations import missing_runnable_reason
from suites.hardware.devices import framework_installed, not_installed_reason
from suites.measure.launch import Launch
from suites.runner import availability
from suites.runner.spanning import Nodes, too_few_nodes
from suites.strategies.base import placing_on
from suites.strategies.jobs import Job, job_for
from suites.strategies.registry import NoSuchStrategy
from suites.workloads import workload_class


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
    missing = missing_runnable_reason(workload_class(case.workload), case.framework)
    if missing:
        return Unresolved(case, missing)
    try:
        return job_for(case)
    except NoSuchStrategy as error:
        return Unresolved(case, str(error))


def unavailable_reason(planned: Plan, nodes: Nodes | None = None) -> str | None:
    """Why the planned case cannot run here, or None: it has no job here, this machine cannot run
    it (`suites.runner.availability.machine_reason`), or its ranks span more of the run's
    `nodes` than there are, or do not divide over them (`suites.runner.spanning.too_few_nodes`)."""
    if isinstance(planned, Unresolved):
        return planned.reason
    with placing_on(nodes):  # a node holds its share of ranks that span nodes, not all of them
        reason = availability.machine_reason(planned)
    if reason or nodes is None or launch_mode(planned) is not Launch.RANKS:
        return reason
    return too_few_nodes(planned, nodes, planned.strategy.processes(planned))


def launch_mode(job: Job) -> Launch:
    """The strategy's `launch`, except that a GPU case, or one that runs the user's code, is
    never timed in the parbench process: a process of its own is killed at the case's deadline
    however it hangs (in a CUDA call or a user's forward, out of Python's reach), gives back all
    its GPU memory when it ends (TensorFlow never returns what it took, which would starve every
    later case of that GPU), and whatever it does (exit, segfault, run out of memory, fork) ends
    only that case, stored `failed` with what happened."""
    launch = job.strategy.rules.launch
    apart = job.case.device is DeviceKind.GPU or job.workload.runs_user_code
    return Launch.ISOLATED if launch is Launch.IN_PROCESS and apart else launch
