"""Compiled vs eager, interleaved: does compiling pay on this machine, and after how many steps?

    python -m suites.studies.compile_speedup [--suite compile] [--filter EXPR] [--rounds 2]

Each compiled case of the suite (after `--filter`) runs with its eager twin (compile none, the
case otherwise the same) through parbench's own launcher (`Runner.launch`: in process, a fresh
process or rank processes, as `parbench run` would), in ABBA order per round — eager, compiled,
compiled, eager — so a shared machine's drift hits both alike. Per round, the ratio of the two
eager medians' sum to the two compiled medians' sum; the speedup is the geometric mean of the
rounds' ratios. compile_s is the median of the compiled runs' (first step − median step), and
the break-even step count is the registry's `compile_break_even_steps` from the eager median,
the eager median / speedup and that compile time. Every run's numerics check must pass; a run
that does not, or a case that is unavailable here, is printed with its reason. The report's
Compilation section gives the same figures from a suite's records, one run of each case.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass

from suites.cases.case import Case
from suites.cases.filters import select
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, Status
from suites.errors import UserError
from suites.grids.grid import load_suite
from suites.records.measurement import Measurement
from suites.records.metric_registry import METRICS, Work
from suites.report.analyses.compilation import break_even_text
from suites.runner.plan import plan, unavailable_reason
from suites.runner.runner import Runner
from suites.strategies.jobs import job_for


@dataclass(frozen=True)
class Interleaved:
    """A compiled case against its eager twin over ABBA rounds."""

    compiled: Case
    eager_medians: tuple[float, ...]
    compiled_medians: tuple[float, ...]
    compile_s: tuple[float, ...]

    @property
    def round_ratios(self) -> list[float]:
        e, c = self.eager_medians, self.compiled_medians
        return [(e[i] + e[i + 1]) / (c[i] + c[i + 1]) for i in range(0, len(e) - 1, 2)]

    @property
    def speedup(self) -> float:
        ratios = self.round_ratios
        return statistics.geometric_mean(ratios)

    @property
    def eager_step_s(self) -> float:
        return statistics.median(self.eager_medians)

    @property
    def break_even_steps(self) -> float | None:
        work = Work(median_s=self.eager_step_s / self.speedup, eager_median_s=self.eager_step_s,
                    compile_s=statistics.median(self.compile_s))
        return METRICS["compile_break_even_steps"].value(work)


def eager_twin(case: Case) -> Case:
    """The same case uncompiled, without the compiler's own parameters."""
    params = {name: value for name, value in case.param_dict.items() if name != "compile_mode"}
    return Case.make(case.workload, case.framework, case.device, case.strategy, case.precision,
                     case.n_devices, params)


def _run(case: Case, timing: TimingConfig) -> Measurement:
    """One run of `case`; raises unless it ran and passed its numerics check."""
    outcome = Runner(timing).launch(job_for(case))
    if outcome.status is not Status.OK or outcome.measurement is None:
        raise RuntimeError(f"{case.id}: {outcome.status}: {outcome.reason}")
    return outcome.measurement


def interleave(compiled: Case, timing: TimingConfig, rounds: int) -> Interleaved:
    eager = eager_twin(compiled)
    runs: dict[Case, list[Measurement]] = {eager: [], compiled: []}
    for _ in range(rounds):
        for case in (eager, compiled, compiled, eager):
            runs[case].append(_run(case, timing))
    return Interleaved(compiled, tuple(m.median for m in runs[eager]), tuple(m.median for m in runs[compiled]),
                       tuple(m.compile_s or 0.0 for m in runs[compiled]))


def _steps(break_even: float | None) -> str:
    text = break_even_text(break_even)
    return text if text == "never" else f"{text} steps"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="compile")
    parser.add_argument("--filter", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        suite = load_suite(args.suite)
        cases = select(suite.cases, args.filter, suite.name)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    failures = 0
    for case in (c for c in cases if c.compile is not Compile.NONE):
        reason = unavailable_reason(plan(case)) or unavailable_reason(plan(eager_twin(case)))
        if reason:
            print(f"{case.id}: unavailable: {reason}")
            continue
        try:
            result = interleave(case, suite.timing, args.rounds)
        except RuntimeError as error:
            print(f"{error}")
            failures += 1
            continue
        print(f"{case.id}: eager {result.eager_step_s * 1e3:.3f} ms, speedup x{result.speedup:.3f} "
              f"(rounds {', '.join(f'{r:.3f}' for r in result.round_ratios)}), compile "
              f"{statistics.median(result.compile_s):.3g} s, break-even: {_steps(result.break_even_steps)}; "
              f"checks passed in {2 * args.rounds} eager and {2 * args.rounds} compiled runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
