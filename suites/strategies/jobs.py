"""A job: a case resolved once — its workload, its strategy plugin with its typed options, and
its compiler with its options.

`job_for` is the one place that looks up a case's workload class and strategy plugin; every
consumer downstream (runnables, launchers, availability, bounds, estimates, workers, checks,
front ends) takes the job. Where a figure needs both the workload and the strategy (the
training state a device holds, over which samples batch statistics are computed), the job
combines them, so that workloads need not know strategies exist.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from suites.cases.case import Case
from suites.cases.vocabulary import Compile, DeviceKind, Framework, Precision
from suites.frameworks.implementations import runnable_class
from suites.records.metrics import CASE_WORK
from suites.measure.capabilities import PipelineBubble
from suites.strategies.base import StrategyPlugin
from suites.strategies.options import NoOptions, options_from
from suites.strategies.registry import plugin_for
from suites.workloads import workload_class
from suites.workloads.base import Workload

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable


@dataclass(frozen=True)
class Compiler:
    """How a case's step is compiled: the compiler and its options (torch.compile's mode)."""

    compile: Compile
    options: Any


@dataclass(frozen=True, eq=False)
class Job:
    """One case, resolved: what it computes, how it is spread, how it is compiled. The measuring
    layer below reads it as a `suites.measure.job_contract.JobContract` (its case and workload)."""

    case: Case
    workload: Workload
    strategy: StrategyPlugin
    #: The plugin's options (an instance of its `options_type`).
    options: Any
    compiler: Compiler

    @property
    def framework(self) -> Framework:
        """The case's framework."""
        return self.case.framework

    @property
    def device(self) -> DeviceKind:
        """The kind of device the case runs on."""
        return self.case.device

    @property
    def n_devices(self) -> int:
        """How many devices the case runs on."""
        return self.case.n_devices

    @property
    def precision(self) -> Precision:
        """The case's precision."""
        return self.case.precision

    def runnable(self) -> "Runnable":
        """The case's runnable in its framework (imported here, at run time)."""
        return self.runnable_class(self)

    @property
    def runnable_class(self) -> type["Runnable"]:
        """The class of the case's runnable in its framework (imported now)."""
        return runnable_class(type(self.workload), self.case.framework)

    @property
    def emulated(self) -> bool:
        return self.strategy.emulated(self)

    def unavailable_reason(self) -> str | None:
        """Why the workload cannot run as the case asks, hardware aside: a precision it does not
        declare (`Workload.precisions`), its own reasons, then whether the strategy computes batch
        statistics the way its model asks."""
        declared = type(self.workload).precisions
        if self.precision not in declared:
            return (f"{self.case.workload} does not run in {self.precision}: its precisions are "
                    f"{', '.join(sorted(map(str, declared)))}")
        rules = self.strategy.rules
        no_sync = rules.no_sync_reason(self.n_devices)
        return self.workload.unavailable_reason() or self.workload.batch_statistics_reason(
            rules.statistics_groups(self.n_devices),
            no_sync and f"batchnorm 'sync' under {self.framework} {self.strategy.strategy}: {no_sync}")

    def statistics_groups(self) -> int:
        """Into how many equal parts of the global batch the step computes batch statistics
        (`Workload.statistics_groups` given the strategy's replicas)."""
        return self.workload.statistics_groups(self.strategy.rules.statistics_groups(self.n_devices))

    def state_estimate(self) -> dict[str, int] | None:
        """The training state one device holds, in bytes, by ZeRO's accounting: the plugin's
        `state_bytes_per_device` from the workload's counts (`Workload.training_state`), plus
        "activations" where the model counts them (the plugin's `activation_bytes_per_device`).
        None for a workload that trains nothing or whose parameter count is not known here."""
        state = self.workload.training_state()
        if state is None:
            return None
        estimate = dict(self.strategy.state_bytes_per_device(self, state.parameters, state.optimizer_states))
        if state.activation_bytes is not None:
            activations = self.strategy.activation_bytes_per_device(self, state.activation_bytes)
            if activations is not None:
                estimate["activations"] = activations
        return estimate

    def work(self) -> dict[str, float | None]:
        """The analytic work of one step and its estimates, keyed like `Work`
        (`suites.records.metrics.CASE_WORK`; None where the case has none)."""
        workload, plugin, state = self.workload, self.strategy, self.state_estimate() or {}
        bubble = plugin.bubble_fraction(self) if isinstance(plugin, PipelineBubble) else None
        values = (workload.flops_per_step() or None, workload.samples_per_step() or None,
                  workload.tokens_per_step() or None, workload.bytes_per_step() or None, state.get("total"),
                  state.get("activations"), bubble, workload.min_bytes_per_step() or None,
                  state.get("parameters"), state.get("gradients"), state.get("optimizer"))
        return dict(zip(CASE_WORK, values, strict=True))

    def check_job(self) -> "Job":
        """The job of the numerics check: the same case at the check's small batch
        (`Workload.check_params`), cut into as many parts as the strategy cuts a step
        (devices, micro-batches)."""
        params = self.workload.check_params(self.strategy.batch_parts(self))
        return job_for(replace(self.case, params=tuple(sorted(params.items()))))


def job_for(case: Case) -> Job:
    """The job of `case`, built once per case and workload class (a workload registered anew
    under the same name gets a job of its own). Raises UnknownWorkload (no such workload) or
    NoSuchStrategy (its framework has no plugin for its strategy)."""
    return _job(case, workload_class(case.workload))


@lru_cache(maxsize=None)
def _job(case: Case, workload: type[Workload]) -> Job:
    plugin = plugin_for(case)
    params = case.param_dict
    compiler = Compiler(case.compile, options_from(plugin.compiler_options.get(case.compile, NoOptions), params))
    return Job(case, workload(case), plugin, options_from(plugin.options_type, params), compiler)


def case_work(case: Case) -> dict[str, float | None]:
    """The analytic work of one step of `case` and its estimates (`Job.work`). Raises
    UnknownWorkload (a KeyError) or ValueError where this process cannot know them: a workload,
    model or strategy not registered here. What the report is given to recompute asv and
    pytest-benchmark rows' metrics (`suites.report.load.derived.fill_metrics`)."""
    return job_for(case).work()
