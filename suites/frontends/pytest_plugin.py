"""pytest-benchmark front end: a suite's cases as benchmark tests, provenance, and the gate.

Loaded through `addopts` in pyproject.toml; elsewhere use ``-p suites.frontends.pytest_plugin``.
A test that takes the argument `parbench_case` runs once per case of ``--parbench-suite``
(default quick), with the case id as test id. By default only the smoke subset runs: the
cheapest case (analytic FLOPs, then bytes moved) of each workload x framework x device x
strategy x precision; the others are marked `benchmark_heavy` and skipped unless ``--heavy``.

Each benchmark is timed the way the core times it: set-up, numerics check and the core's
warm-up (`suites.measure.timing.warm_up`), then `benchmark.pedantic` rounds of blocks of
step + synchronise, the block as long as the core's (no pytest-benchmark calibration).
`extra_info` carries the case, status, derived metrics, numerics check and `emulated`;
`machine_info["parbench"]` carries `suites.records.provenance.environment()`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.frontends.gate import BASELINE_FORMAT, Baseline, GateTiming, ReferenceKernel, RelativeTime, Step, \
    Verdict, clock_for, judge, measure_relative, run_single_threaded, threshold_from
from suites.frontends.prepared import CaseUnavailable, NumericsFailed, prepare
from suites.grids.grid import DEFAULT_SUITE, Suite, load_suite
from suites.records.measurement import Measurement
from suites.records.metrics import derive
from suites.records.output_files import OutputFile, output_path
from suites.hardware.peaks import PeakTable
from suites.records.provenance import environment, machine_label, threads_in_use
from suites.records.store import DEFAULT_RESULTS_DIR
from suites.strategies.jobs import job_for

HEAVY_MARKER = "benchmark_heavy"
#: What every gate baseline the gate writes holds near its start (`Baseline.to_json`): a file
#: holding it is the gate's own to write again.
BASELINE_SIGNATURE = f'"format": "{BASELINE_FORMAT}"'.encode()
_GATE = pytest.StashKey["GateSession"]()
_SUITE = pytest.StashKey[Suite]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("parbench", "parbench benchmarks (pytest-benchmark front end)")
    group.addoption("--parbench-suite", default=DEFAULT_SUITE, metavar="NAME",
                    help=f"built-in suite or .toml grid whose cases the benchmark tests run "
                         f"(default {DEFAULT_SUITE})")
    group.addoption("--heavy", action="store_true",
                    help=f"also run heavy benchmarks (marker {HEAVY_MARKER}): every case of the "
                         f"suite, not only the smoke subset")
    group.addoption("--parbench-gate-baseline", type=Path, metavar="PATH",
                    help="judge each benchmarked case against this gate baseline; a regression "
                         "fails the test")
    group.addoption("--parbench-gate-save", type=output_path, metavar="PATH",
                    help="record a gate baseline of the benchmarked cases to PATH")
    group.addoption("--parbench-gate-threshold", metavar="FRACTION",
                    help="allowed growth of a case's time relative to the reference kernel "
                         "(default $PARBENCH_GATE_THRESHOLD, else 0.2 = 20%%)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{HEAVY_MARKER}: heavy pytest-benchmark cases, opt-in with --heavy")
    try:
        config.stash[_SUITE] = load_suite(config.getoption("--parbench-suite"))
        gate = GateSession.from_options(
            config.getoption("--parbench-gate-baseline"), config.getoption("--parbench-gate-save"),
            config.getoption("--parbench-gate-threshold"))
    except UserError as error:
        raise pytest.UsageError(str(error)) from None
    if gate.active:
        run_single_threaded()  # before any test module loads a framework; see gate.py
    config.stash[_GATE] = gate


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "parbench_case" not in metafunc.fixturenames:
        return
    suite = metafunc.config.stash[_SUITE]
    smoke = smoke_cases(suite.cases)
    metafunc.parametrize("parbench_case", [
        pytest.param(case, id=case.id, marks=() if case in smoke else getattr(pytest.mark, HEAVY_MARKER))
        for case in suite.cases])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--heavy"):
        return
    skip = pytest.mark.skip(reason="heavy benchmark: run with --heavy")
    for item in items:
        if HEAVY_MARKER in item.keywords:
            item.add_marker(skip)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    machine_info["parbench"] = {**environment(), "threads": threads_in_use()}


def pytest_sessionfinish(session: pytest.Session) -> None:
    gate = session.config.stash.get(_GATE, None)
    if gate is not None and (not gate.save() or gate.judged_nothing):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the summary says why


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    gate = config.stash.get(_GATE, None)
    if gate is None or not gate.active:
        return
    terminalreporter.section("parbench regression gate")
    for line in gate.summary():
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def parbench_suite(pytestconfig: pytest.Config) -> Suite:
    return pytestconfig.stash[_SUITE]


@pytest.fixture(scope="session")
def parbench_gate(pytestconfig: pytest.Config) -> "GateSession":
    return pytestconfig.stash[_GATE]


def smoke_cases(cases: Iterable[Case]) -> set[Case]:
    """The cheapest case of each workload x framework x device x strategy x precision."""
    cheapest: dict[tuple[Any, ...], Case] = {}
    for case in cases:
        key = (case.workload, case.framework, case.device, case.strategy, case.precision)
        if key not in cheapest or _cost(case) < _cost(cheapest[key]):
            cheapest[key] = case
    return set(cheapest.values())


def _cost(case: Case) -> tuple[float, int, int, str]:
    workload = job_for(case).workload
    return workload.flops_per_step(), workload.bytes_per_step() or 0, case.n_devices, case.id


@dataclass
class GateSession:
    """The gate for one pytest session: judges cases against a baseline and/or records one (into
    `output`, checked when the session starts, before anything is measured)."""

    threshold: float
    baseline: Baseline | None = None
    output: OutputFile | None = None
    reference: ReferenceKernel = field(default_factory=ReferenceKernel)
    timing: GateTiming = field(default_factory=GateTiming)
    measured: dict[str, RelativeTime] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    save_problem: str | None = None

    @classmethod
    def from_options(cls, baseline_path: Path | None, save_path: Path | None,
                     threshold: str | None) -> "GateSession":
        reference = ReferenceKernel()
        baseline = Baseline.load(baseline_path, reference.name) if baseline_path else None
        output = None
        if save_path is not None:
            output = OutputFile(save_path, "--parbench-gate-save", BASELINE_SIGNATURE, create_folder=True)
            output.check()
        return cls(threshold_from(threshold), baseline, output, reference)

    @property
    def active(self) -> bool:
        return self.baseline is not None or self.output is not None

    def check(self, case: Case, step: Step) -> Verdict | None:
        """Measure `step` (one step of `case`, synchronised) relative to the reference; fail
        the test if it regressed."""
        if not self.active:
            return None
        case_id = case.id

        def measure() -> RelativeTime:
            return measure_relative(step, self.reference, self.timing, clock_for(case))

        if self.baseline is None:
            self.measured[case_id] = measure()
            return None
        try:
            verdict = judge(case_id, measure, self.baseline.ratio(case_id), self.threshold)
        except UserError as error:  # a baseline ratio that cannot be compared fails, never passes
            pytest.fail(f"regression gate: {error}", pytrace=False)
        self.measured[case_id] = verdict.current
        self.verdicts.append(verdict)
        if verdict.regressed:
            pytest.fail(f"performance regression: {verdict}", pytrace=False)
        return verdict

    def save(self) -> bool:
        """Write the baseline where one was asked for and measured; False (the problem kept for the
        summary) where it could not be written."""
        if self.output is None or not self.measured:
            return True
        try:
            self.output.write(Baseline(self.reference.name, dict(self.measured), environment()).to_json())
        except UserError as error:
            self.save_problem = str(error)
            return False
        return True

    @property
    def judged(self) -> list[Verdict]:
        """The verdicts against a baseline ratio (a case not in the baseline is recorded, not judged)."""
        return [verdict for verdict in self.verdicts if verdict.change is not None]

    @property
    def judged_nothing(self) -> bool:
        """A baseline was given and the session measured cases, none of them in it: the gate fails."""
        return self.baseline is not None and bool(self.verdicts) and not self.judged

    def summary(self) -> list[str]:
        lines = [str(verdict) for verdict in self.verdicts]
        regressed = sum(verdict.regressed for verdict in self.verdicts)
        if self.judged_nothing:
            lines.append(f"nothing judged: none of the {len(self.verdicts)} case(s) measured is in the baseline; "
                         f"record the baseline over these cases (--parbench-gate-save)")
        elif self.baseline is not None:
            lines.append(f"{len(self.judged)} case(s) judged, {regressed} regressed "
                         f"(threshold +{self.threshold:.0%} in time relative to {self.reference.name})")
        if self.save_problem is not None:
            lines.append(f"baseline NOT saved: {self.save_problem}")
        elif self.output is not None:
            lines.append(f"baseline of {len(self.measured)} case(s) saved to {self.output.path}" if self.measured
                         else "no case was measured: no baseline saved")
        return lines


def benchmark_case(benchmark: Any, case: Case, timing: TimingConfig, gate: GateSession) -> None:
    """The body of a benchmark test: prepare, time with pedantic rounds, record, gate."""
    benchmark.group = f"{case.workload} {case.device}"
    benchmark.extra_info.update(case=case.to_dict(), status=str(Status.OK), metrics={}, check=None,
                                emulated=job_for(case).emulated)
    try:
        prepared = prepare(case, timing)
    except CaseUnavailable as error:
        pytest.skip(str(error))
    except NumericsFailed as error:
        benchmark.extra_info.update(status=str(Status.FAILED), check=error.check.to_dict())
        raise
    try:
        block = prepared.warmup.block_size
        probe = prepared.runnable.memory_probe()  # training cases: peak memory over the rounds
        if probe is not None:
            probe.start()
        try:
            benchmark.pedantic(prepared.step_and_synchronize, rounds=timing.min_samples, iterations=block)
        finally:
            memory = tuple(probe.stop()) if probe is not None else ()
        benchmark.extra_info["check"] = prepared.check.to_dict()
        if benchmark.stats:  # None under --benchmark-disable: the step ran once, untimed
            measurement = Measurement(samples=tuple(benchmark.stats.stats.data), block_size=block,
                                      warmup_steps=prepared.warmup.steps,
                                      first_step_s=prepared.warmup.first_step_s,
                                      target_rel_iqr=timing.target_rel_iqr, stop_reason="fixed rounds",
                                      memory=memory, recompiles=prepared.warmup.recompiles)
            job = job_for(case)
            benchmark.extra_info["metrics"] = derive(case, measurement, DEFAULT_RESULTS_DIR, machine_label(),
                                                     PeakTable.load(), job.work(), job.emulated)
            benchmark.extra_info["compile_s"] = measurement.compile_s
        gate.check(case, prepared.step_and_synchronize)
    finally:
        prepared.close()
