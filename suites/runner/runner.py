"""The runner: the one way from a planned case to its record. Built once per run with where its
records go, the rate probe its bounds predict from and how it launches, it owns the case's
availability, its estimate and deadline, its launch (in this process, in an isolated one, as
rank processes — across nodes: a Slurm allocation it runs inside, or a `--nnodes` group) and its
record.
Front ends plan their grid's cases (`suites.runner.plan.plan`) and hand the plans to it; every
finished case is stored at once."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, Status
from suites.measure.launch import Launch
from suites.records.contention import Contention, judge, read_cpu, with_attempts
from suites.records.record import Record
from suites.runner import launchers, probe, slurm
from suites.runner.bounds import Bound, Probe, bound_for
from suites.runner.deadline import case_timeout
from suites.runner.eta import COMPILE_OVERHEAD_S, IN_PROCESS_OVERHEAD_S, LAUNCH_OVERHEAD_S, steps_estimate_s
from suites.runner.execute import Outcome
from suites.runner.plan import Plan, Unresolved, launch_mode, plan, unavailable_reason
from suites.runner.recording import RunContext, keeps_cores_busy, store_outcome
from suites.runner.spanning import Nodes
from suites.strategies.base import placing_on
from suites.strategies.jobs import Job

__all__ = ["Plan", "RunContext", "Runner", "Unresolved", "plan"]

#: How a runner launches a job it has bounded: the launchers' modes, or a test's or a tool's own.
Launcher = Callable[[Job, TimingConfig], Outcome]


@dataclass
class Runner:
    """Runs planned cases under one timing and stores their records in `context` (None: a runner
    that only launches, for asv, pytest-benchmark and parbench's own tools)."""

    timing: TimingConfig
    context: RunContext | None = None
    #: FLOP/s of a framework's GEMMs here, which bounds predict a first step from (None: the
    #: GEMM probe, `suites.runner.probe.probe_flops_per_s`).
    rate: Probe | None = None
    #: Launches a job after its bound: None, the launch mode its strategy says (`launch_mode`).
    launcher: Launcher | None = None
    #: The nodes a case's ranks may span: the Slurm allocation this process runs in (two nodes or
    #: more), or the node group of `parbench run --nnodes`; None: this machine alone.
    nodes: Nodes | None = field(default_factory=slurm.allocation)

    @classmethod
    def storing(cls, context: RunContext, launcher: Launcher | None = None, nodes: Nodes | None = None) -> "Runner":
        """A runner that stores every record in `context`, timed as it says; its ranks span `nodes`,
        else the Slurm allocation it runs in, if any."""
        return cls(context.timing, context, launcher=launcher, nodes=nodes if nodes is not None else slurm.allocation())

    def bound(self, job: Job) -> Bound:
        """How an available job is kept inside its first-step limit (`suites.runner.bounds`)."""
        return bound_for(job, self.timing, self.rate or probe.probe_flops_per_s)

    def deadline_s(self, job: Job | None = None) -> float:
        """How long the job's processes (or any case's, without one) may run before they are stopped."""
        return case_timeout(self.timing, job)

    def estimate_s(self, planned: Plan) -> float:
        """Expected seconds for the planned case: nothing if it is unavailable here or refused as
        too slow, else its steps (`suites.runner.eta.steps_estimate_s`) plus set-up or launch,
        and a compiled case's compiles; a case run where it can be stopped, at most its deadline."""
        if unavailable_reason(planned, self.nodes):
            return 0.0
        assert isinstance(planned, Job)
        bound = self.bound(planned)
        if bound.refused:
            return 0.0
        launched = launch_mode(planned) is not Launch.IN_PROCESS or bound.isolated
        compiles = COMPILE_OVERHEAD_S if planned.case.compile is not Compile.NONE else 0.0
        total = (steps_estimate_s(self.timing, bound.predicted_step_s) + compiles
                 + (LAUNCH_OVERHEAD_S if launched else IN_PROCESS_OVERHEAD_S))
        return min(total, self.deadline_s(planned)) if bound.isolated else total

    def launch(self, job: Job) -> Outcome:
        """Run an available job and return what it produced. A case predicted far over its
        first-step limit is refused; an in-process one near it runs in a process of its own that
        is stopped at its deadline (`suites.runner.bounds`); else the launcher, by default the
        strategy's launch mode (`suites.runner.plan.launch_mode`: a GPU case or the user's
        code never runs in this process)."""
        bound = self.bound(job)
        if bound.refused:
            return Outcome(Status.UNAVAILABLE, bound.refused,
                           details={"predicted_first_step_s": bound.predicted_step_s})
        if self.launcher is not None:
            return self.launcher(job, self.timing)
        if bound.isolated and job.strategy.rules.launch is Launch.IN_PROCESS:  # in a process of its own either way
            return launchers.run_bounded(job, self.timing, bound)
        launch = launch_mode(job)
        if launch is Launch.RANKS:
            return launchers.run_ranks(job, self.timing, self.nodes)
        return launchers.LAUNCHERS[launch](job, self.timing)

    def run(self, planned: Plan | Case) -> Record:
        """Run the planned case if it is available here (else keep the reason), then store its
        record with what competed for its cores while it was timed (`suites.records.contention`).

        A case measured `contended` (other processes took its cores over its timed blocks) is
        run again, at most `timing.contention_retries` more times, until a measurement is not
        contended. The record keeps that one, else the least contended, with its own verdict:
        still `contended` where every try was; its `contention.attempts` and `attempt_shares`
        say how many measurements were taken and what others took in each. Only a verdict
        measured over timed blocks is retried: the load-average fallback lags a minute behind
        and would say the same again."""
        if self.context is None:
            raise ValueError("this runner stores no records: build it with Runner.storing(context)")
        with placing_on(self.nodes):  # its backend and `emulated` as its ranks are placed on the nodes
            return self._run(plan(planned) if isinstance(planned, Case) else planned)

    def _run(self, planned: Plan) -> Record:
        reason = unavailable_reason(planned, self.nodes)
        if reason:
            return self._store(planned, Outcome(Status.UNAVAILABLE, reason))
        assert isinstance(planned, Job)
        busy = keeps_cores_busy(planned)
        tries: list[tuple[Outcome, Contention]] = []
        for _ in range(1 + max(0, int(self.timing.contention_retries))):
            before = read_cpu()
            outcome = self.launch(planned)
            usage = outcome.measurement.cpu if outcome.measurement is not None else None
            verdict = judge(before, read_cpu(), os.cpu_count() or 1, usage, busy)
            tries.append((outcome, verdict))
            if not verdict.contended or not _measured(outcome):
                break
        outcome, verdict = _kept(tries)
        if len(tries) > 1:
            verdict = with_attempts(verdict, (tried.others_core_share for _, tried in tries))
        return self._store(planned, outcome, verdict)

    def run_all(self, planned: Iterable[Plan | Case]) -> Iterator[Record]:
        """Yield each record as soon as it is stored, so a display can follow progress."""
        assert self.context is not None
        self.context.store.ensure_writable(self.context.environment["machine"])
        for one in planned:
            yield self.run(one)

    def _store(self, planned: Plan, outcome: Outcome, contention: Contention | None = None) -> Record:
        assert self.context is not None
        return store_outcome(planned, outcome, self.context, contention)


def _measured(outcome: Outcome) -> bool:
    return outcome.status is Status.OK and outcome.measurement is not None and outcome.measurement.cpu is not None


def _kept(tries: list[tuple[Outcome, Contention]]) -> tuple[Outcome, Contention]:
    """The last try where it is not contended (or not a measured success: a failure is kept as
    it happened), else the least contended one."""
    outcome, verdict = tries[-1]
    if not verdict.contended or not _measured(outcome):
        return tries[-1]
    return min(tries, key=lambda tried: tried[1].others_core_share or 0.0)
