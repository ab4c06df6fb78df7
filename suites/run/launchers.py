"""Launch a case the way its strategy says: in this process, in one isolated worker, or as a
pool of rank processes on 127.0.0.1.

Every process gets its own session (process group), a hard timeout, and on the way out
SIGTERM then SIGKILL after a grace period: a TF worker waiting for a missing peer ignores
SIGTERM. A crashed or hung process becomes a failed outcome carrying the tail of its output;
nothing is left running and no port stays held.
"""
from __future__ import annotations

import json
import os
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
from suites.run.execute import Outcome, execute_in_process
from suites.cases.strategy_plugins import plugin_for
from suites.strategies.base import Launch
from suites.cases.timing_config import TimingConfig
from suites.run.timing import case_limit_s, first_step_limit_s
from suites.cases.vocabulary import DeviceKind, Status
from suites.workloads import workload_class

GRACE_S = 5.0
POLL_S = 0.05
STARTUP_ALLOWANCE_S = 120.0
TAIL_LINES = 20


def case_timeout(timing: TimingConfig) -> float:
    """`timing.case_timeout_s` if set, else framework import + rendezvous, the longest the timer
    lets a case take (its first step, then `case_limit_s`), and one more budget for the check
    and per-rank probes."""
    if timing.case_timeout_s is not None:
        return timing.case_timeout_s
    return STARTUP_ALLOWANCE_S + first_step_limit_s(timing) + case_limit_s(timing) + timing.budget_s


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


#: The cores a rank process pins itself to (comma-separated), set by `run_ranks`.
CPUS_ENV = "PARBENCH_CPUS"


def rank_cpus(case: Case, processes: int) -> list[list[int]] | None:
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
    if (case.device is not DeviceKind.CPU or processes < 2 or processes > len(cores)
            or workload_class(case.workload).kind == "collective"):
        return None
    per_rank = len(cores) // processes
    return [cores[rank * per_rank:(rank + 1) * per_rank] for rank in range(processes)]


def pin_from_env() -> list[int] | None:
    """In a rank process: pin to the cores the launcher chose (before any framework starts
    its threads, which inherit the affinity). Returns them, or None when not pinned."""
    value = os.environ.get(CPUS_ENV)
    if not value:
        return None
    cpus = [int(cpu) for cpu in value.split(",")]
    os.sched_setaffinity(0, cpus)
    return cpus


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


def _tail(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
    except OSError:
        return []


def _worker_command(case: Case, timing: TimingConfig, out: Path) -> list[str]:
    return [sys.executable, "-m", "suites.run.worker", "--case", json.dumps(case.to_dict()),
            "--timing", json.dumps(asdict(timing)), "--out", str(out)]


def _run_processes(case: Case, timing: TimingConfig, envs: list[dict[str, str]]) -> Outcome:
    """Start one worker per env, wait for all under one deadline, combine their outcomes."""
    with tempfile.TemporaryDirectory(prefix="parbench-") as tmp:
        tmpdir = Path(tmp)
        processes = []
        for index, extra_env in enumerate(envs):
            log = open(tmpdir / f"rank{index}.log", "wb")
            processes.append((subprocess.Popen(
                _worker_command(case, timing, tmpdir / f"rank{index}.json"),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **extra_env}, start_new_session=True), log))
        deadline = time.monotonic() + case_timeout(timing)
        try:
            crashed, timed_out = _wait_all([p for p, _ in processes], deadline)
        finally:
            for process, log in processes:
                _stop(process)
                log.close()
        return _combine(case, timing, tmpdir, [p for p, _ in processes], timed_out, crashed)


def _wait_all(processes: list[subprocess.Popen], deadline: float) -> tuple[int | None, bool]:
    """Wait for every process, but stop at the first non-zero exit: its peers would wait for
    it forever. Returns (index of that process or None, whether the deadline passed)."""
    while True:
        codes = [process.poll() for process in processes]
        crashed = next((i for i, code in enumerate(codes) if code not in (None, 0)), None)
        if crashed is not None or all(code is not None for code in codes):
            return crashed, False
        if time.monotonic() >= deadline:
            return None, True
        time.sleep(POLL_S)


def _combine(case: Case, timing: TimingConfig, tmpdir: Path, processes: list[subprocess.Popen],
             timed_out: bool, crashed: int | None = None) -> Outcome:
    outcomes: list[Outcome | None] = []
    for index, _ in enumerate(processes):
        result = tmpdir / f"rank{index}.json"
        outcomes.append(Outcome.from_dict(json.loads(result.read_text())) if result.exists() else None)
    # The rank that died first is the cause; its peers' failures are usually the symptom.
    order = sorted(range(len(processes)), key=lambda index: index != crashed)
    for index in order:
        process, outcome = processes[index], outcomes[index]
        if outcome is None or outcome.status is Status.FAILED:
            if timed_out and outcome is None:
                why = f"rank {index} did not finish within {case_timeout(timing):.0f} s (killed)"
            elif outcome is None:
                why = f"rank {index} exited with code {process.returncode} before reporting"
            else:
                why = f"rank {index}: {outcome.reason}"
            return Outcome(Status.FAILED, why, details={
                "rank": index, "output_tail": _tail(tmpdir / f"rank{index}.log"),
                **(outcome.details if outcome else {})})
    primary = outcomes[0]  # rank 0's, which carries every rank's busy time (gathered in-band)
    assert primary is not None
    return primary


def run_isolated(case: Case, timing: TimingConfig) -> Outcome:
    """One fresh process: for cases that must configure a framework before it initialises."""
    return _run_processes(case, timing, [plugin_for(case).isolated_env(case)])


def run_ranks(case: Case, timing: TimingConfig) -> Outcome:
    """`plugin.processes(case)` rank processes, each told its rank and the rendezvous ports."""
    plugin = plugin_for(case)
    count = plugin.processes(case)
    ports = free_ports(plugin.ports_needed(case))
    threads = str(threads_per_process(case, count))
    cpus = rank_cpus(case, count)
    envs = [{**plugin.rank_env(case, rank, count, ports),
             "OMP_NUM_THREADS": threads, "PARBENCH_THREADS": threads,
             **({CPUS_ENV: ",".join(map(str, cpus[rank]))} if cpus else {})}
            for rank in range(count)]
    return _run_processes(case, timing, envs)


#: How each `Launch` mode runs a case; `launch_case` is the one entry point.
LAUNCHERS: dict[Launch, Callable[[Case, TimingConfig], Outcome]] = {
    Launch.IN_PROCESS: execute_in_process,
    Launch.ISOLATED: run_isolated,
    Launch.RANKS: run_ranks,
}


def launch_case(case: Case, timing: TimingConfig) -> Outcome:
    """Run an available case with its strategy's launcher and return what it produced."""
    return LAUNCHERS[plugin_for(case).launch](case, timing)
