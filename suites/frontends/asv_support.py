"""asv benchmark classes generated from the registry, in scikit-learn's style: mixins supply
`time_*`/`track_*`; a generated class only declares its cases, version and timing.

One class per workload and launch kind, holding the selected suite's cases of that workload:

- `<Workload>` (e.g. `Matmul`): cases timed in the asv process. `time_step` is timed by asv's
  own timer (setup: set-up, numerics check and the core's warm-up; the timed call: one step
  plus device synchronisation); `track_tflops` / `track_samples_per_s` (/ `track_tokens_per_s`) time the same prepared
  case with the core's adaptive loop (`suites.measure.timing.measure`).
- `<Workload>Launched` (e.g. `TrainStepLaunched`): cases of strategies that run in their own
  processes (launch kind ISOLATED or RANKS). asv's timer would time process start-up, so every
  `track_*` runs the case through `suites.runner.runner.Runner.launch` and reports what the ranks measured:
  `track_rank_step_s` is the in-rank median step time.

A `track_*` method exists on a class only where the workload has that metric (a matmul has no
samples per step; `track_compile_s` only in a class holding compiled cases). A compiled case's
compiler is part of its `precision` axis value (``fp32+inductor``), as of its id, so the
benchmarks and asv history of uncompiled cases are unchanged. The asv parameters are named
axes (`asv_layout.AXES`: framework, device,
strategy, precision, params), each listing the values the class's cases take. asv runs their
cartesian product; a combination that is no case of the suite is skipped in `setup` (asv shows
n/a), as is an unavailable case. Each benchmark method lists its class's case ids in `case_ids`,
which asv copies into benchmarks.json: that is how a reader tells the two kinds of skip apart.
Each class's asv `version` is its workload's `version_of` (`suites.strategies.versions`): a hash
of exactly the code its cases run, so editing that code invalidates its old results.
"""
from __future__ import annotations

import types
from abc import ABC, abstractmethod
from typing import Any, Callable

from asv_runner.benchmarks.mark import SkipNotImplemented

from suites import knobs
from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, Status
from suites.frontends.prepared import CaseUnavailable, PreparedCase, prepare, runs_in_process
from suites.grids.grid import DEFAULT_SUITE, Suite, load_suite
from suites.records.asv_layout import AXES, axis_values, case_id_from_axes, class_name
from suites.records.measurement import Measurement
from suites.records.metric_registry import METRICS
from suites.records.metrics import derive
from suites.hardware.peaks import PeakTable
from suites.records.provenance import machine_label
from suites.records.store import DEFAULT_RESULTS_DIR
from suites.runner.plan import plan, unavailable_reason
from suites.runner.runner import Runner
from suites.measure.timing import measure
from suites.strategies.jobs import Job, job_for
from suites.strategies.versions import version_of
from suites.workloads import WORKLOADS, Workload

#: Which suite asv benchmarks: a built-in suite name or the path of a .toml grid.
SUITE_ENV = "PARBENCH_ASV_SUITE"
#: The benchmarks/ module of each workload kind (`Workload.kind`).
KIND_MODULES = {"kernel": "kernels", "training": "training", "collective": "collectives"}
BENCHMARK_PREFIXES = ("time_", "track_")


def selected_suite() -> Suite:
    return load_suite(knobs.read(SUITE_ENV) or DEFAULT_SUITE)


class NotACase(NotImplementedError):
    """A combination of axis values that is no case of the suite: asv skips it (n/a)."""


class CaseBenchmark(ABC):
    """Shared by every generated class: one named asv parameter per axis of the case id."""

    param_names = list(AXES)
    params: list[list[str]]
    workload: str
    case_ids: frozenset[str]
    version: str
    timeout: float
    timing: TimingConfig

    def _case(self, axes: tuple[str, ...]) -> Case:
        case_id = case_id_from_axes(self.workload, axes)
        if case_id not in self.case_ids:
            raise NotACase(f"{case_id} is not a case of the suite")
        return Case.from_id(case_id)

    @abstractmethod
    def _measurement(self, case: Case) -> Measurement:
        """The core's measurement of the case (what the `track_*` metrics derive from)."""

    def _metric(self, axes: tuple[str, ...], name: str) -> float:
        case = self._case(axes)
        job = job_for(case)
        value = derive(case, self._measurement(case), DEFAULT_RESULTS_DIR, machine_label(),
                       PeakTable.load(), job.work(), job.emulated).get(name)
        if value is None:
            raise SkipNotImplemented(f"{case.id} has no {name}")
        return value


class InProcessBenchmark(CaseBenchmark):
    """Cases timed in the asv process."""

    #: The case this process prepared. asv re-runs `setup` before every timing sample, but a
    #: step needs no fresh state between samples (the core times consecutive steps too), so
    #: preparing again (framework set-up, numerics check, warm-up) would only repeat the same
    #: work. asv ends the process after the benchmark.
    _prepared: PreparedCase | None = None

    def setup(self, *axes: str) -> None:
        case = self._case(axes)
        prepared = InProcessBenchmark._prepared
        if prepared is None or prepared.case != case:
            InProcessBenchmark._prepared = None
            if prepared is not None:
                prepared.close()
            prepared = InProcessBenchmark._prepared = prepare(case, self.timing)
        self.prepared = prepared

    def time_step(self, *axes: str) -> None:
        self.prepared.step_and_synchronize()

    def _measurement(self, case: Case) -> Measurement:
        return measure(self.prepared.runnable, self.timing)


class LaunchedBenchmark(CaseBenchmark):
    """Cases of multi-process strategies, run by the core's launcher; figures come from the ranks."""

    def setup(self, *axes: str) -> None:
        reason = unavailable_reason(plan(self._case(axes)))
        if reason:
            raise CaseUnavailable(reason)

    def _measurement(self, case: Case) -> Measurement:
        outcome = Runner(self.timing).launch(job_for(case))
        if outcome.status is Status.UNAVAILABLE:
            raise SkipNotImplemented(outcome.reason)
        if outcome.status is Status.FAILED or outcome.measurement is None:
            tail = "\n".join(outcome.details.get("output_tail", []))
            raise RuntimeError(f"{case.id}: {outcome.reason}\n{tail}".rstrip())
        return outcome.measurement

    def track_rank_step_s(self, *axes: str) -> float:
        return self._measurement(self._case(axes)).median

    track_rank_step_s.unit = "seconds"  # type: ignore[attr-defined]


class TrackTflops:
    def track_tflops(self: Any, *axes: str) -> float:
        return self._metric(axes, "tflops")

    track_tflops.unit = METRICS["tflops"].unit  # type: ignore[attr-defined]


class TrackSamplesPerS:
    def track_samples_per_s(self: Any, *axes: str) -> float:
        return self._metric(axes, "samples_per_s")

    track_samples_per_s.unit = METRICS["samples_per_s"].unit  # type: ignore[attr-defined]


class TrackTokensPerS:
    def track_tokens_per_s(self: Any, *axes: str) -> float:
        return self._metric(axes, "tokens_per_s")

    track_tokens_per_s.unit = METRICS["tokens_per_s"].unit  # type: ignore[attr-defined]


class TrackPeakMemory:
    def track_peak_memory_bytes(self: Any, *axes: str) -> float:
        return self._metric(axes, "peak_memory_bytes")

    track_peak_memory_bytes.unit = METRICS["peak_memory_bytes"].unit  # type: ignore[attr-defined]


class TrackCompileS:
    def track_compile_s(self: Any, *axes: str) -> float:
        """A compiled case's compile time (first step - median step; never in `time_step`)."""
        case = self._case(axes)
        if case.compile is Compile.NONE:
            raise SkipNotImplemented(f"{case.id} is not compiled")
        value = self._measurement(case).compile_s
        if value is None:
            raise SkipNotImplemented(f"{case.id} has no compile_s")
        return value

    track_compile_s.unit = "seconds"  # type: ignore[attr-defined]


def _metric_mixins(workload: type[Workload], cases: list[Case]) -> tuple[type, ...]:
    instances = [workload(case) for case in cases]
    mixins: list[type] = []
    if any(w.flops_per_step() for w in instances):
        mixins.append(TrackTflops)
    if any(w.samples_per_step() for w in instances):
        mixins.append(TrackSamplesPerS)
    if any(w.tokens_per_step() for w in instances):  # the sequence models
        mixins.append(TrackTokensPerS)
    if workload.kind == "training":  # the runnables' memory probes measure training steps
        mixins.append(TrackPeakMemory)
    if any(case.compile is not Compile.NONE for case in cases):
        mixins.append(TrackCompileS)
    return tuple(mixins)


def axis_params(cases: list[Case]) -> list[list[str]]:
    """asv's `params`: for each axis, the values the cases take, in the suite's order."""
    return [list(dict.fromkeys(values)) for values in zip(*(axis_values(case) for case in cases))]


def _listing_cases(method: Callable[..., Any], case_ids: list[str]) -> Callable[..., Any]:
    """A copy of a benchmark method that carries `case_ids`. asv writes a method's own
    attributes into benchmarks.json, and the mixins' methods are shared between classes."""
    copy = types.FunctionType(method.__code__, method.__globals__, method.__name__,
                              method.__defaults__, method.__closure__)
    copy.__dict__.update(method.__dict__, case_ids=case_ids)
    return copy



def _deadline_s(timing: TimingConfig, case: Case) -> float:
    """How long asv lets a benchmark of `case` run: the runner's deadline for its job (any
    case's, where it has none here)."""
    planned = plan(case)
    return Runner(timing).deadline_s(planned if isinstance(planned, Job) else None)


def _benchmark_class(name: str, module: str, suite: Suite, workload: type[Workload],
                     base: type[CaseBenchmark], cases: list[Case]) -> type:
    case_ids = [case.id for case in cases]
    cls = type(name, (base, *_metric_mixins(workload, cases)), {
        "__module__": module,
        "__doc__": f"{workload.name} cases of suite {suite.name!r} ({base.__doc__})",
        "params": axis_params(cases),
        "workload": workload.name,
        "case_ids": frozenset(case_ids),
        "version": version_of(workload),
        "timeout": max(_deadline_s(suite.timing, case) for case in cases),
        "timing": suite.timing,
    })
    for attribute in dir(cls):
        if attribute.startswith(BENCHMARK_PREFIXES):
            setattr(cls, attribute, _listing_cases(getattr(cls, attribute), case_ids))
    return cls


def benchmark_classes(kind: str, module: str, suite: Suite | None = None) -> dict[str, type]:
    """The classes of the workloads of `kind` that have cases in `suite` (default: selected)."""
    suite = suite or selected_suite()
    classes: dict[str, type] = {}
    for workload in WORKLOADS.values():
        if workload.kind != kind:
            continue
        cases = [case for case in suite.cases if case.workload == workload.name]
        for launched, base in ((False, InProcessBenchmark), (True, LaunchedBenchmark)):
            group = [case for case in cases if runs_in_process(case) is not launched]
            if group:
                name = class_name(workload, launched)
                classes[name] = _benchmark_class(name, module, suite, workload, base, group)
    return classes
