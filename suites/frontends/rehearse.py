"""`parbench run --rehearse`: every GPU (and TPU) case of a suite, rehearsed on this CPU
(`suites.runner.rehearsal`), one line each as it ends, then a table and the counts.
Nothing is stored: the records go to a temporary folder, removed at the end. Inside a Slurm
allocation, or with `--nnodes N`, a table of what the cluster's run would decide of each GPU case
comes first (`suites.runner.rehearsal.cluster_decision`)."""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from typing import Iterable

from rich.console import Console
from rich.table import Table

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Status
from suites.errors import UserError
from suites.frontends.run_progress import LEFT_OUT
from suites.runner.cap import RunCap
from suites.runner.deadline import case_timeout
from suites.runner.eta import Eta
from suites.runner.plan import plan
from suites.runner import slurm
from suites.runner.rehearsal import NodesLikeThisOne, cluster_decision, nodes_like_this_one, rehearsal_of
from suites.runner.spanning import Nodes
from suites.runner.runner import RunContext, Runner
from suites.strategies.jobs import job_for
from suites.records.record import Record
from suites.records.store import ResultsStore
from suites.measure.process_env import REHEARSAL_ENV, env_set

#: A rehearsal checks the path and the numerics, not the speed: a short timing.
REHEARSAL_TIMING = {"budget_s": 0.3, "warmup_s": 0.05, "min_samples": 3, "min_time_s": 0.05}


def rehearsal_timing(timing: TimingConfig) -> TimingConfig:
    return replace(timing, **{key: min(getattr(timing, key), value) for key, value in REHEARSAL_TIMING.items()})


def rehearsal_deadline_s(case: Case, timing: TimingConfig) -> float:
    """A rehearsed case's deadline: its own (`case_timeout`) times how many of its emulated
    devices share each core here. A rehearsal checks the path, not the speed, and 8 logical
    devices training a ResNet on 2 cores (TF mirrored, sync batch norm, an fp16 or tf32 loss
    trajectory) computed past the one-device deadline without hanging."""
    if timing.case_timeout_s is not None:
        return timing.case_timeout_s
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return case_timeout(timing, job_for(case)) * max(1.0, case.n_devices / max(1, cores))


def rehearsed_nodes(nnodes: int | None, across: list[str]) -> Nodes | NodesLikeThisOne | None:
    """The nodes a rehearsal decides cases on: `nnodes` nodes like this one (`--nnodes N`), else the
    Slurm allocation this process runs in, else none. `across` names the options of a run across
    machines also given (--node-rank, --rdzv-endpoint): a rehearsal starts nothing there."""
    if across:
        raise UserError(f"--rehearse decides cases as placed on --nnodes nodes and runs nothing across them: "
                        f"leave out {' and '.join(across)}")
    if nnodes is not None:
        return nodes_like_this_one(nnodes)
    return slurm.allocation()


def rehearse(suite: str, cases: Iterable[Case], timing: TimingConfig, console: Console,
             cap: RunCap | None = None, nodes: Nodes | NodesLikeThisOne | None = None) -> int:
    """Rehearse the device cases among `cases`, those that fit in `cap` (`--max-minutes`, as a
    run's: `suites.runner.cap`); exit status 1 if any failed. Across `nodes`, first what the
    cluster's run would decide of each GPU case."""
    devices = [case for case in cases if case.device in (DeviceKind.GPU, DeviceKind.TPU)]
    if not devices:
        raise UserError(f"{suite}: no GPU or TPU cases (after --filter): nothing to rehearse; "
                        f"run the suite as it is, or pick a suite with device cases (gpu, standard, parallel)")
    if nodes is not None:
        console.print(_decisions(suite, [case for case in devices if case.device is DeviceKind.GPU], nodes))
        if not nodes.gpus_per_node:
            console.print("this machine sees no GPU, so neither do the nodes decided on: every GPU case reads "
                          "unavailable; rehearse on a node of the cluster, or inside its allocation", markup=False)
    console.print(f"rehearsal of {suite}: {len(devices)} GPU/TPU cases on this CPU at small sizes, through "
                  f"their device code path; not results, nothing stored", markup=False)
    rows = []
    with tempfile.TemporaryDirectory(prefix="parbench-rehearsal-") as folder, env_set(REHEARSAL_ENV, "1"):
        context = RunContext(suite=f"rehearsal:{suite}", store=ResultsStore(folder),
                             timing=rehearsal_timing(timing), label="rehearsal")
        context.store.ensure_writable(context.environment["machine"])
        timing_of_all = context.timing
        rehearsals = [rehearsal_of(case) for case in devices]
        eta = Eta([Runner(timing_of_all).estimate_s(plan(one.case)) if one.case else 0.0 for one in rehearsals])
        clock = cap.clock if cap is not None else time.monotonic
        for case, rehearsal in zip(devices, rehearsals):
            if rehearsal.case is None:
                row = (case.id, "-", "not rehearsed", rehearsal.reason)
                eta.left_out()
            elif cap is not None and not cap.admits(eta.estimates[eta.done], eta.scale()):
                cap.leave_out(case)
                eta.left_out()
                row = (case.id, rehearsal.case.id, LEFT_OUT, "did not fit in the time left")
            else:
                context.timing = replace(timing_of_all, case_timeout_s=rehearsal_deadline_s(rehearsal.case,
                                                                                            timing_of_all))
                started = clock()
                record = Runner.storing(context).run(rehearsal.case)
                eta.finished(clock() - started)
                row = (case.id, rehearsal.case.id, str(record.status), _what_happened(record))
            rows.append(row)
            console.print(f"{row[2]:>13}  {row[0]}" + (f"  ({row[3]})" if row[2] != str(Status.OK) else ""),
                          markup=False, soft_wrap=True)
    console.print(_table(suite, rows))
    counts = {status: sum(row[2] == status for row in rows)
              for status in (str(Status.OK), str(Status.UNAVAILABLE), str(Status.FAILED), "not rehearsed", LEFT_OUT)}
    console.print(", ".join(f"{n} {status}" for status, n in counts.items()) + " (rehearsal: nothing stored)",
                  markup=False)
    return 1 if counts[str(Status.FAILED)] else 0


def _what_happened(record: Record) -> str:
    if record.status is not Status.OK:
        return record.reason or ""
    check = record.check
    if check is not None and not check.checked:
        return str(check)
    return f"check {'pass' if check.passed else 'FAIL'} ({check.metric}={check.value:.3g})" if check else "ok"


def _table(suite: str, rows: list[tuple[str, str, str, str]]) -> Table:
    table = Table(title=f"rehearsal of {suite} (GPU/TPU cases on the CPU; not results)", show_lines=False)
    for column in ("device case", "rehearsed as", "status", "check or reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _decisions(suite: str, cases: list[Case], nodes: Nodes | NodesLikeThisOne) -> Table:
    """What the run across `nodes` would decide of each GPU case, one row a case."""
    table = Table(title=f"{suite} on {nodes.name()}: what the run decides of each GPU case (nothing run)")
    for column in ("device case", "available", "backend", "emulated", "divided by", "nodes", "launch"):
        table.add_column(column, overflow="fold")
    for case in cases:
        decided = cluster_decision(case, nodes)
        if decided.reason:
            table.add_row(case.id, f"no: {decided.reason}", "", "", "", "", "")
        else:
            table.add_row(case.id, "yes", decided.backend, "yes" if decided.emulated else "no",
                          f"{decided.divided_by} GPU(s)", str(decided.nodes), decided.launch)
    return table
