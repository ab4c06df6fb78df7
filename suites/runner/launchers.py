"""Launch a case the way its strategy says: in this process, in one isolated worker, or as a
pool of rank processes on this machine (across nodes, each node's share of them:
`suites.runner.spanning`).

Every process gets its own session (process group), a hard timeout, and on the way out
SIGTERM then SIGKILL after a grace period: a TF worker waiting for a missing peer ignores
SIGTERM. A crashed or hung process becomes a failed outcome carrying the tail of its output;
nothing is left running and no port stays held. A launcher killed outright (`kill -9`) stops
nothing: each process it started is told who it is (`--launcher`) and ends itself, its own
processes and the launch's temp folder once it is gone (`suites.runner.watchdog`).
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Status
from suites.records.contention import CASE_ROOT_ENV
from suites.runner.bounds import Bound
from suites.runner.execute import FAILED_AT, Outcome, execute_in_process
from suites.runner.rank_outcomes import Members, merge, outcome_file, read_outcomes
from suites.measure.launch import Launch
from suites.runner import termination
from suites.runner.watchdog import launcher_args
from suites.measure.scratch import TMPDIR_ENV
from suites.measure.process_env import CPUS_ENV, STACKS_SIGNAL
from suites.measure.capabilities import NeedsIsolatedEnvironment
from suites.runner.deadline import case_timeout
from suites.runner.spanning import Nodes, compile_cache_env, compile_caches_detail, nodes_needed, rank_env_on_nodes
from suites.strategies.jobs import Job

#: The module each process of a case out of this one runs, `python -m WORKER` (`parbench worker`
#: is the same entry point under the name users start it by).
WORKER = "suites.runner.case_process"
GRACE_S = 5.0
POLL_S = 0.05
TAIL_LINES = 20
#: How long the launcher lets hung processes write their stacks before it stops them.
STACKS_WAIT_S = 1.0


def free_ports(count: int) -> list[int]:
    """Ports the OS says are free on 127.0.0.1 right now, picked at run time."""
    sockets, ports = [], []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in sockets:
        sock.close()
    return ports


def threads_per_process(case: Case, processes: int) -> int:
    """Split the usable cores between processes so ranks don't oversubscribe the CPU
    (oversubscribing 2 cores with 2 ranks of 2 threads each costs ~1.6x)."""
    return max(1, len(os.sched_getaffinity(0)) // processes)


def rank_cpus(job: Job, processes: int) -> list[list[int]] | None:
    """Disjoint core sets, one per rank process of a CPU training or kernel case, when the
    cores go round (None otherwise: one process, a GPU case, a collective, or more ranks than
    cores).

    Ranks emulating devices on one CPU are pinned so none migrates or lands beside another:
    two pinned gloo ranks on two cores ran an mlp DDP step ~9% faster than unpinned ones, and
    varied ±1.7% from run to run instead of ±3.3%. A bare all-reduce is the other way round
    (64 KiB: 1.5-2.1 ms pinned vs 0.9-1.1 ms free; 16 MiB: +5-8%): gloo's transport threads
    then wait for the one core their rank computes on, so collectives are left unpinned.
    Where ranks outnumber the cores, they share them, and the scheduler balances better than
    any fixed split.
    """
    cores = sorted(os.sched_getaffinity(0))
    if (job.case.device is not DeviceKind.CPU or processes < 2 or processes > len(cores)
            or job.workload.kind == "collective"):
        return None
    per_rank = len(cores) // processes
    return [cores[rank * per_rank:(rank + 1) * per_rank] for rank in range(processes)]


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL whatever is still there after the grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            # the leader is gone; sweep the group in case children survived it
            os.killpg(process.pid, signal.SIGKILL)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def _log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(path: Path) -> list[str]:
    return _log_text(path).splitlines()[-TAIL_LINES:]


def worker_command(job: Job, timing: TimingConfig, out: Path) -> list[str]:
    """The command of one process of `job` (`python -m WORKER`), which writes its outcome to `out`."""
    return [sys.executable, "-m", WORKER, "--case", json.dumps(job.case.to_dict()),
            "--timing", json.dumps(asdict(timing)), "--out", str(out)]


def run_processes(job: Job, timing: TimingConfig, envs: list[dict[str, str]],
                  bound: Bound | None = None, first_rank: int = 0) -> Outcome:
    """Start one worker process per env (`python -m WORKER`), wait for all under one deadline,
    combine their outcomes. A `bound` case (`run_bounded`) still running at the deadline was too
    slow, not hung. The processes' temp folder is this launch's, removed here: a process stopped
    at the deadline cannot remove its own; a compiled case's ranks keep their compile caches in it,
    each its own (`compile_cache_env`)."""
    with tempfile.TemporaryDirectory(prefix="parbench-") as tmp:
        tmpdir = Path(tmp)
        processes = []
        stopped_at = math.inf  # wall-clock time this launcher began stopping the processes
        try:
            with termination.deferred():  # a SIGTERM now would miss the child being started
                for index, extra_env in enumerate(envs):
                    log = open(tmpdir / f"rank{index}.log", "wb")
                    processes.append((subprocess.Popen(
                        [*worker_command(job, timing, outcome_file(tmpdir, index)), *launcher_args(tmpdir)],
                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env={**os.environ, TMPDIR_ENV: tmp, CASE_ROOT_ENV: str(os.getpid()),
                             **compile_cache_env(job, f"{tmp}/compile-rank{first_rank + index}"), **extra_env},
                        start_new_session=True), log))
            deadline = time.monotonic() + case_timeout(timing, job)
            exits, timed_out = _wait_all([p for p, _ in processes], deadline)
            if timed_out:
                stopped_at = time.time()
                _dump_stacks([p for p, _ in processes])
        finally:
            for process, log in processes:
                _stop(process)
                log.close()
        if timed_out and bound is not None:
            return _too_slow(job, timing, bound, _tail(tmpdir / "rank0.log"))
        outcome = _outcome_of_processes(job, timing, tmpdir, [p for p, _ in processes], timed_out, exits,
                                        stopped_at, first_rank)
        outcome.details.update(compile_caches_detail(job, "in the launch's temp folder on this node", os.environ))
        return outcome


def _too_slow(job: Job, timing: TimingConfig, bound: Bound, output_tail: list[str]) -> Outcome:
    """The outcome of a bounded case stopped at its deadline."""
    return Outcome(Status.UNAVAILABLE, (
        f"too slow here: not finished within its {case_timeout(timing, job):.3g} s limit (predicted "
        f"first step {bound.predicted_step_s:.3g} s); stopped"), details={"output_tail": output_tail})


def _dump_stacks(processes: list[subprocess.Popen]) -> None:
    """Ask every process still running to write its Python stacks to its log, and give them
    `STACKS_WAIT_S` to do it (`faulthandler` writes from its signal handler, even while the
    process waits in C, e.g. in a collective)."""
    signalled = False
    for process in processes:
        if process.poll() is None:
            try:
                os.kill(process.pid, STACKS_SIGNAL)
                signalled = True
            except ProcessLookupError:
                continue
    if signalled:
        time.sleep(STACKS_WAIT_S)


def _frame_place(path: str, line: str, function: str) -> str:
    """`function (file:line)`, the file from its package down (torch/..., suites/...)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
            break
    else:
        path = "suites/" + path.rsplit("/suites/", 1)[1] if "/suites/" in path else Path(path).name
    return f"{function} ({path}:{line})"


def stuck_at(log: str) -> str | None:
    """Where a worker was, from the last stack dump in its log: the innermost frame of its main
    thread (the one running the worker), the innermost one from another folder (what called
    into that package, past its own wrappers: e.g. a pipeline schedule's step waiting in a
    receive), and the parbench functions that led there, outermost first (from the runnable's
    stage on); None without a dump."""
    main = None
    entry = WORKER.replace(".", "/") + ".py"  # the worker's file: its main thread's outermost frame
    for block in _THREAD_HEADER.split(log)[1:]:
        frames = _FRAME.findall(block.split("\n\n", 1)[0])
        if any(path.endswith(entry) for path, _, _ in frames):
            main = frames  # the last dump's wins
    if not main:
        return None
    folder = main[0][0].rpartition("/")[0]
    caller = next((frame for frame in main[1:] if frame[0].rpartition("/")[0] != folder), None)
    ours = [function for path, _, function in reversed(main)
            if "/suites/" in path and not any(f"/suites/{harness}/" in path for harness in ("measure", "runner"))]
    return (_frame_place(*main[0]) + (f" in {_frame_place(*caller)}" if caller else "")
            + (f" via {' > '.join(ours)}" if ours else ""))


#: faulthandler's dump: a header per thread, then its frames, innermost first.
_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", re.M)
_FRAME = re.compile(r'^  File "(.+)", line (\d+) in (.+)$', re.M)


def _wait_all(processes: list[subprocess.Popen], deadline: float) -> tuple[dict[int, float], bool]:
    """Wait for every process, but stop at the first non-zero exit: its peers would wait for
    it forever (a worker whose case failed exits non-zero too, see `suites.runner.case_process`).

    Returns the processes found exited non-zero, each with the last wall-clock time
    (`time.time()`, the clock of a worker's `failed_at`) it was seen still running, and
    whether the deadline passed. That time is a lower bound of when it ended: several
    processes can end between two polls, and the bound keeps a crash before a peer's
    consequent failure in the right order."""
    running_at = {index: time.time() for index in range(len(processes))}
    while True:
        polled_at = time.time()
        codes = [process.poll() for process in processes]
        exits = {i: running_at[i] for i, code in enumerate(codes) if code not in (None, 0)}
        if exits or all(code is not None for code in codes):
            return exits, False
        if time.monotonic() >= deadline:
            return {}, True
        running_at.update((i, polled_at) for i, code in enumerate(codes) if code is None)
        time.sleep(POLL_S)


def _first_failure(outcomes: list[Outcome | None], exits: dict[int, float],
                   stopped_at: float = math.inf) -> int | None:
    """The process whose failure came first, or None if none failed.

    A process failed if it wrote a failed outcome or none at all. The earliest failure is the
    cause; its peers' failures are usually the symptom (a collective whose peer went away).
    Failures are ordered by when they happened: a worker stamps its failed outcome with the
    time of the error (`failed_at`); a process that exited non-zero without one (a crash) by
    the bound `_wait_all` gives; one stopped by this launcher after a peer ended, or still
    running at the deadline, comes last: so does one that failed once the launcher began stopping
    the processes at `stopped_at` (a peer killed under it: the consequence of the hang)."""
    when: dict[int, float] = {}
    for index, outcome in enumerate(outcomes):
        if outcome is None:
            when[index] = exits.get(index, math.inf)
        elif outcome.status is Status.FAILED:
            failed_at = outcome.details.get(FAILED_AT, exits.get(index, math.inf))
            when[index] = math.inf if failed_at >= stopped_at else failed_at
    return min(when, key=lambda index: (when[index], index)) if when else None


def _outcome_of_processes(job: Job, timing: TimingConfig, tmpdir: Path, processes: list[subprocess.Popen],
                          timed_out: bool, exits: dict[int, float] | None = None,
                          stopped_at: float = math.inf, first_rank: int = 0) -> Outcome:
    """One outcome of the processes (`rank_outcomes.merge`): rank 0's, else the first failure's with
    its reason. The processes are ranks `first_rank`, `first_rank` + 1, ... (a node of several holds
    some of them)."""
    exits = exits or {}
    outcomes = read_outcomes(tmpdir, len(processes))

    def unreported(index: int) -> str:
        if timed_out:
            why = f"rank {index + first_rank} did not finish within {case_timeout(timing, job):.0f} s (killed)"
            stuck = [f"rank {rank + first_rank} in {where}" for rank in range(len(processes))
                     if (where := stuck_at(_log_text(tmpdir / f"rank{rank}.log")))]
            return why + (f"; hung: {'; '.join(stuck)}" if stuck else "")
        if index in exits or not exits:
            return f"rank {index + first_rank} exited with code {processes[index].returncode} before reporting"
        # stopped here because a peer ended with an error, though that peer reported success
        peer = min(exits, key=lambda other: (exits[other], other))
        return (f"rank {index + first_rank} was stopped before reporting, after rank {peer + first_rank} "
                f"exited with code {processes[peer].returncode}")

    def blamed_details(index: int) -> dict[str, object]:
        # When it failed, where known: a crash by the bound `_wait_all` gives (what another node's
        # launcher orders this failure by, `suites.runner.nodes`).
        ended = {FAILED_AT: exits[index]} if outcomes[index] is None and index in exits else {}
        return {"output_tail": _tail(tmpdir / f"rank{index}.log"), **ended}

    return merge(outcomes, _first_failure(outcomes, exits, stopped_at), unreported,
                 Members(first=first_rank), blamed_details)


def isolated_env(job: Job) -> dict[str, str]:
    """What the case's fresh process gets on top of this one's environment: what its strategy
    asks for (`NeedsIsolatedEnvironment`), else nothing."""
    return job.strategy.isolated_env(job) if isinstance(job.strategy, NeedsIsolatedEnvironment) else {}


def run_in_process(job: Job, timing: TimingConfig) -> Outcome:
    """In this process (`execute_in_process`; no worker is started)."""
    return execute_in_process(job, timing)


def run_isolated(job: Job, timing: TimingConfig) -> Outcome:
    """One fresh worker process: for cases that must configure a framework before it initialises."""
    return run_processes(job, timing, [isolated_env(job)])


def run_ranks(job: Job, timing: TimingConfig, nodes: Nodes | None = None) -> Outcome:
    """`plugin.processes(job)` rank processes, each told its rank and the rendezvous
    ports; where the run has several `nodes` (a Slurm allocation, a `parbench run --nnodes`
    group), ranks that do not fit on one node across the nodes they need (`suites.runner.spanning`)."""
    plugin = job.strategy
    count = plugin.processes(job)
    ports = free_ports(plugin.ports_needed(job))
    if nodes is not None and nodes_needed(job, nodes, count) > 1:
        # each rank's threads are its node's (OMP_NUM_THREADS unset), not a share of this one's cores
        per_node = nodes.ranks_per_node(job)
        envs = [rank_env_on_nodes(plugin.rank_env(job, rank, count, ports), rank, per_node, nodes)
                for rank in range(count)]
        return nodes.run_step(job, timing, envs)
    threads = str(threads_per_process(job.case, count))
    cpus = rank_cpus(job, count)
    envs = [{**plugin.rank_env(job, rank, count, ports),
             "OMP_NUM_THREADS": threads, "PARBENCH_THREADS": threads,
             **({CPUS_ENV: ",".join(map(str, cpus[rank]))} if cpus else {})}
            for rank in range(count)]
    return run_processes(job, timing, envs)


#: How each `Launch` mode runs a job (`suites.runner.runner.Runner.launch` picks the mode).
LAUNCHERS: dict[Launch, Callable[[Job, TimingConfig], Outcome]] = {
    Launch.IN_PROCESS: run_in_process,
    Launch.ISOLATED: run_isolated,
    Launch.RANKS: run_ranks,
}


def run_bounded(job: Job, timing: TimingConfig, bound: Bound) -> Outcome:
    """An in-process case predicted near its first-step limit, in one isolated process instead,
    which is stopped at the case's deadline (`case_timeout`): `unavailable`, too slow, if it
    gets there. The parbench process could not stop it while a step ran."""
    return run_processes(job, timing, [isolated_env(job)], bound)
