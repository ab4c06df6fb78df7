"""asv benchmark classes generated from the registry, in scikit-learn's style: mixins supply
`time_*`/`track_*`; a generated class only declares its cases, version and timing.

One class per workload and launch kind, holding the selected suite's cases of that workload:

- `<Workload>` (e.g. `Matmul`): cases timed in the asv process. `time_step` is timed by asv's
  own timer (setup: set-up, numerics check and the core's warm-up; the timed call: one step
  plus device synchronisation); `track_tflops` / `track_samples_per_s` time the same prepared
  case with the core's adaptive loop (`suites.timing.measure`).
- `<Workload>Launched` (e.g. `TrainStepLaunched`): cases of strategies that run in their own
  processes (launch kind ISOLATED or RANKS). asv's timer would time process start-up, so every
  `track_*` runs the case through `suites.runner.launch` and reports what the ranks measured:
  `track_rank_step_s` is the in-rank median step time.

A `track_*` method exists on a class only where the workload has that metric (a matmul has no
samples per step). The single asv parameter, `case`, takes case ids; asv stores each value as
its Python repr, which `case_from_asv_param` turns back into a Case. Each class's asv `version`
is its workload's `Workload.version()`, so editing a workload invalidates its old results.
"""
from __future__ import annotations

import ast
import os
from abc import ABC, abstractmethod
from typing import Any

from asv_runner.benchmarks.mark import SkipNotImplemented

from ..availability import unavailable_reason
from ..case import Case
from ..grid import DEFAULT_SUITE, Suite, load_suite
from ..launch import case_timeout
from ..measurement import Measurement
from ..metrics import derive
from ..peaks import PeakTable
from ..provenance import machine_label
from ..runner import launch
from ..store import DEFAULT_RESULTS_DIR
from ..timing import TimingConfig, measure
from ..vocabulary import Status
from ..workloads import WORKLOADS, Workload
from .prepared import CaseUnavailable, PreparedCase, prepare, runs_in_process

#: Which suite asv benchmarks: a built-in suite name or the path of a .toml grid.
SUITE_ENV = "PARBENCH_ASV_SUITE"
#: The benchmarks/ module of each workload kind (`Workload.kind`).
KIND_MODULES = {"kernel": "kernels", "training": "training", "collective": "collectives"}
LAUNCHED_SUFFIX = "Launched"


def selected_suite() -> Suite:
    return load_suite(os.environ.get(SUITE_ENV) or DEFAULT_SUITE)


def case_from_asv_param(value: str) -> Case:
    """The case of a parameter value as asv stores it (``"'matmul/torch/...'"``) or plain."""
    text = ast.literal_eval(value) if value[:1] in "'\"" else value
    return Case.from_id(text)


class CaseBenchmark(ABC):
    """Shared by every generated class: one asv parameter, `case`, whose values are case ids."""

    param_names = ["case"]
    params: list[list[str]]
    version: str
    timeout: float
    timing: TimingConfig

    @abstractmethod
    def _measurement(self, case_id: str) -> Measurement:
        """The core's measurement of the case (what the `track_*` metrics derive from)."""

    def _metric(self, case_id: str, name: str) -> float:
        case = Case.from_id(case_id)
        value = derive(case, self._measurement(case_id), DEFAULT_RESULTS_DIR, machine_label(),
                       PeakTable.load()).get(name)
        if value is None:
            raise SkipNotImplemented(f"{case_id} has no {name}")
        return value


class InProcessBenchmark(CaseBenchmark):
    """Cases timed in the asv process."""

    #: The case this process prepared. asv re-runs `setup` before every timing sample, but a
    #: step needs no fresh state between samples (the core times consecutive steps too), so
    #: preparing again (framework set-up, numerics check, warm-up) would only repeat the same
    #: work. asv ends the process after the benchmark.
    _prepared: PreparedCase | None = None

    def setup(self, case_id: str) -> None:
        prepared = InProcessBenchmark._prepared
        if prepared is None or prepared.case.id != case_id:
            InProcessBenchmark._prepared = None
            if prepared is not None:
                prepared.close()
            prepared = InProcessBenchmark._prepared = prepare(Case.from_id(case_id), self.timing)
        self.prepared = prepared

    def time_step(self, case_id: str) -> None:
        self.prepared.step_and_synchronize()

    def _measurement(self, case_id: str) -> Measurement:
        return measure(self.prepared.runnable, self.timing)


class LaunchedBenchmark(CaseBenchmark):
    """Cases of multi-process strategies, run by the core's launcher; figures come from the ranks."""

    def setup(self, case_id: str) -> None:
        reason = unavailable_reason(Case.from_id(case_id))
        if reason:
            raise CaseUnavailable(reason)

    def _measurement(self, case_id: str) -> Measurement:
        outcome = launch(Case.from_id(case_id), self.timing)
        if outcome.status is Status.UNAVAILABLE:
            raise SkipNotImplemented(outcome.reason)
        if outcome.status is Status.FAILED or outcome.measurement is None:
            tail = "\n".join(outcome.details.get("output_tail", []))
            raise RuntimeError(f"{case_id}: {outcome.reason}\n{tail}".rstrip())
        return outcome.measurement

    def track_rank_step_s(self, case_id: str) -> float:
        return self._measurement(case_id).median

    track_rank_step_s.unit = "seconds"  # type: ignore[attr-defined]


class TrackTflops:
    def track_tflops(self: Any, case_id: str) -> float:
        return self._metric(case_id, "tflops")

    track_tflops.unit = "TFLOP/s"  # type: ignore[attr-defined]


class TrackSamplesPerS:
    def track_samples_per_s(self: Any, case_id: str) -> float:
        return self._metric(case_id, "samples_per_s")

    track_samples_per_s.unit = "samples/s"  # type: ignore[attr-defined]


def _metric_mixins(workload: type[Workload], cases: list[Case]) -> tuple[type, ...]:
    instances = [workload(case) for case in cases]
    mixins: list[type] = []
    if any(w.flops_per_step() for w in instances):
        mixins.append(TrackTflops)
    if any(w.samples_per_step() for w in instances):
        mixins.append(TrackSamplesPerS)
    return tuple(mixins)


def benchmark_classes(kind: str, module: str, suite: Suite | None = None) -> dict[str, type]:
    """The classes of the workloads of `kind` that have cases in `suite` (default: selected)."""
    suite = suite or selected_suite()
    classes: dict[str, type] = {}
    for workload in WORKLOADS.values():
        if workload.kind != kind:
            continue
        cases = [case for case in suite.cases if case.workload == workload.name]
        in_process = [case for case in cases if runs_in_process(case)]
        launched = [case for case in cases if not runs_in_process(case)]
        for name, base, group in ((workload.__name__, InProcessBenchmark, in_process),
                                  (workload.__name__ + LAUNCHED_SUFFIX, LaunchedBenchmark, launched)):
            if not group:
                continue
            classes[name] = type(name, (base, *_metric_mixins(workload, group)), {
                "__module__": module,
                "__doc__": f"{workload.name} cases of suite {suite.name!r} ({base.__doc__})",
                "params": [[case.id for case in group]],
                "version": workload.version(),
                "timeout": case_timeout(suite.timing),
                "timing": suite.timing,
            })
    return classes
