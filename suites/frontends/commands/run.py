"""`parbench run`: run a suite with a live progress display; store every record; print a table."""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, replace

from suites import knobs
from suites.cases.case import Case
from suites.cases.filters import __doc__ as filter_help
from suites.cases.filters import select
from suites.cases.timing_config import RANGES as TIMING_RANGES
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.ranges import Range
from suites.grids.grid import DEFAULT_SUITE, Suite, load_suite
from suites.frontends.case_loop import run_cases
from suites.frontends.rehearse import rehearse, rehearsed_nodes
from suites.frontends.run_progress import run_progress
from suites.frontends.run_table import print_results, run_console
from suites.records.output_files import output_path
from suites.records.provenance import now_iso
from suites.records.run_summary import RunSummary
from suites.records.store import DEFAULT_RESULTS_DIR, ResultsStore
from suites.report.render.terminal import terminal
from suites.runner.cap import MachineLoad, RunCap, cap_seconds
from suites.runner.eta import Eta, busy_machine_note, duration_text
from suites.runner.node_run import NodeRun, run_on_nodes
from suites.runner.nodes import NodeSpan
from suites.runner.runner import Plan, RunContext, Runner, plan

#: The run's clock (monotonic seconds): what the progress display, the ETA and `--max-minutes`
#: read; tests put a controlled one in its place.
clock = time.monotonic
#: What `--max-minutes` reads the share of the cores other work takes from; tests put a fake in its place.
machine_load = MachineLoad

SUMMARY = "run a suite (default: quick) and store its records"
KNOBS = knobs.CASE_KNOBS


#: A run estimated past this many seconds is started only when asked (--yes) or capped.
LONG_RUN_S = 12 * 3600
#: Seconds the nodes of a `--nnodes` run have to meet, by default.
RDZV_TIMEOUT_S = 300.0
#: What --max-minutes takes: a cap under 3 s fits no case (one in this process takes 2 s more
#: than its steps, a launched one 8 s: `suites.runner.eta`).
MAX_MINUTES = Range(float, low=0.05, unit="minutes")
#: What --nnodes and --node-rank take.
NODES = Range(int, low=1)
NODE_RANK = Range(int, low=0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = filter_help
    parser.add_argument("--suite", default=DEFAULT_SUITE,
                        help=f"built-in suite name or path of a .toml grid (default {DEFAULT_SUITE})")
    parser.add_argument("--filter", help="choose cases, e.g. \"framework=torch matmul\"")
    parser.add_argument("--results", type=output_path, default=DEFAULT_RESULTS_DIR,
                        help="results directory (default results/)")
    parser.add_argument("--label", help="machine label stored with every record "
                                        "(default $PARBENCH_MACHINE or the hostname)")
    parser.add_argument("--budget", type=TIMING_RANGES["budget_s"].argument,
                        help="override the suite's timing budget per case, seconds")
    parser.add_argument("--max-minutes", type=MAX_MINUTES.argument,
                        help="cap the run: start a case only while the time spent plus its estimate "
                             "fits; the cases left out are listed at the end and in the run's summary")
    parser.add_argument("--rehearse", action="store_true",
                        help="rehearse the suite's GPU/TPU cases on this CPU at small sizes through their "
                             "device code path (gloo ranks, logical devices, CUDA's optimizer kernels); "
                             "nothing is stored")
    parser.add_argument("--nnodes", type=NODES.argument,
                        help="run the suite across this many machines without Slurm: start the same command on each, "
                             "with its own --node-rank (0 keeps the records) and node 0's --rdzv-endpoint; with "
                             "--rehearse: show what a run on this many nodes like this one decides of each GPU case")
    parser.add_argument("--node-rank", type=NODE_RANK.argument,
                        help="this machine's place, 0 to NNODES-1 (with --nnodes)")
    parser.add_argument("--rdzv-endpoint", help="HOST:PORT where node 0 listens: its address and a free port")
    parser.add_argument("--rdzv-timeout", type=knobs.SECONDS.argument, default=RDZV_TIMEOUT_S,
                        help=f"seconds the nodes have to meet (default {RDZV_TIMEOUT_S:g})")
    parser.add_argument("--yes", action="store_true",
                        help=f"start a run estimated past {LONG_RUN_S // 3600:g} h without --max-minutes "
                             "(refused otherwise)")


def run(args: argparse.Namespace) -> int:
    knobs.check_label(args.label)
    cap_s = cap_seconds(args.max_minutes)
    started_at, run_started = now_iso(), clock()
    # The cap counts from the start: estimating imports the frameworks and probes their GEMMs.
    cap = RunCap(cap_s, clock, machine_load()) if cap_s is not None else None
    suite = load_suite(args.suite)
    cases = select(suite.cases, args.filter, suite.name)
    timing = suite.timing
    if args.budget is not None:
        timing = replace(timing, budget_s=args.budget)
    if args.rehearse:
        across = [f"--{name.replace('_', '-')}" for name in ("node_rank", "rdzv_endpoint") if getattr(args, name)
                  is not None]
        return rehearse(suite.name, cases, timing, terminal(), cap, rehearsed_nodes(args.nnodes, across))
    plans = [plan(case) for case in cases]
    chosen = Chosen(suite, cases, plans, timing, cap, started_at, run_started)
    return run_on_nodes(_node_run(args), cases, plans, timing, lambda span: _run_here(args, chosen, span))


def _node_run(args: argparse.Namespace) -> NodeRun | None:
    """Where this machine's `--nnodes` group meets; None without those options."""
    given = [name for name in ("nnodes", "node_rank", "rdzv_endpoint") if getattr(args, name) is not None]
    if not given:
        return None
    if len(given) < 3:
        raise UserError("a run across machines needs --nnodes, --node-rank and --rdzv-endpoint together "
                        f"(given: {', '.join('--' + name.replace('_', '-') for name in given)})")
    return NodeRun(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_timeout)


@dataclass
class Chosen:
    """The suite a run chose: its cases planned, their timing, the run's cap and when it started."""

    suite: Suite
    cases: list[Case]
    plans: list[Plan]
    timing: TimingConfig
    cap: RunCap | None
    started_at: str
    run_started: float


def _run_here(args: argparse.Namespace, chosen: Chosen, span: NodeSpan | None) -> int:
    """Run the chosen cases here (node 0 of a `--nnodes` run: with the other nodes), store every
    record, print the table and the run's summary."""
    suite, cases, plans, timing, cap = chosen.suite, chosen.cases, chosen.plans, chosen.timing, chosen.cap
    store = ResultsStore(args.results)
    context = RunContext(suite=suite.name, store=store, timing=timing, label=args.label)
    console = run_console()
    runner = Runner.storing(context, nodes=span)
    eta = Eta([runner.estimate_s(planned) for planned in plans])
    estimate_s = eta.remaining_s()
    capped = f"; capped at {args.max_minutes:g} min (--max-minutes)" if cap is not None else ""
    if estimate_s > LONG_RUN_S and cap is None and not args.yes:
        raise UserError(f"{suite.name}: {len(cases)} cases, about {duration_text(estimate_s)}: past "
                        f"{LONG_RUN_S // 3600:g} h, so not started; choose fewer with --filter, run what fits "
                        f"with --max-minutes M, or pass --yes to start it anyway")
    busy = busy_machine_note(os.getloadavg()[0], len(os.sched_getaffinity(0)))
    console.print(f"{suite.name}: {len(cases)} cases, about {duration_text(estimate_s)}{capped}{busy}",
                  markup=False)
    store.ensure_writable(context.environment["machine"])
    with run_progress(console, suite.name, cases, eta.remaining_s()) as progress:
        records = run_cases(runner, cases, plans, eta, cap, progress, clock, chosen.run_started)
    print_results(console, records, title=f"suite {suite.name} - run {context.run_id}")
    counts = {s: sum(r.status is s for r in records) for s in Status}
    stored = f"records in {store.path_for(context.environment['machine'])}" if records else "no record stored"
    console.print(f"{counts[Status.OK]} ok, {counts[Status.UNAVAILABLE]} unavailable, {counts[Status.FAILED]} "
                  f"failed; {stored}")
    summary = store.save_run_summary(RunSummary(
        run_id=context.run_id, suite=suite.name, machine=context.environment["machine"], started=chosen.started_at,
        finished=now_iso(), cases=len(cases), counts={str(s): n for s, n in counts.items()},
        estimate_s=round(estimate_s, 1), elapsed_s=round(clock() - chosen.run_started, 1),
        max_minutes=args.max_minutes, left_out=[c.id for c in cap.left_out] if cap else []))
    if cap is not None and cap.left_out:
        console.print(f"{cap.left_out_text()}; run summary in {summary}", markup=False, soft_wrap=True)
        if not records:
            raise UserError(f"--max-minutes {args.max_minutes:g} fits no case: each was estimated to take longer, "
                            f"so nothing was measured; give it more minutes")
    if cap is not None and cap.past_text():
        console.print(f"{cap.past_text()}; run summary in {summary}", markup=False, soft_wrap=True)
    return 1 if counts[Status.FAILED] else 0
