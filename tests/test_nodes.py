"""A suite across machines without Slurm: `parbench run --nnodes 2 --node-rank R --rdzv-endpoint
HOST:PORT` on two hosts (two network namespaces joined by a veth pair, tests/netns_hosts.py).
Node 0 keeps the records; a case whose ranks span the nodes runs its ranks on both; a node whose
ranks die fails that case with the reason and the suite goes on; nodes that disagree on the cases
refuse in one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suites.cases.vocabulary import Status
from suites.runner.execute import FAILED_AT, Outcome
from suites.runner.nodes import NodeSpan
from tests.netns_hosts import missing, two_hosts
from tests.test_slurm import records_of, suite_toml

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
#: The node group's port on node 0's address: a fresh namespace has every port free.
PORT = 29400

#: One case per way ranks are placed on the nodes (torch's rendezvous, a TF cluster's TF_CONFIG) and
#: one that runs on node 0 alone. (FSDP's ranks are placed as DDP's: the placement does not look at
#: the strategy.)
SPANNING = suite_toml("Across two hosts: ranks on both, and a case on node 0", 0.2,
                      ("torch", '"ddp"', 2), ("tf", '"multiworker"', 2), ("torch", '"single"', 1))
DIES = suite_toml("A node's rank dies mid-case", 0.2, ("torch", '"ddp"', 2), ("torch", '"single"', 1),
                  model="stalls_on_rank_1")
#: The model of DIES: an mlp whose rank 1, once past the rendezvous (its first forward), writes its pid
#: to $STALL_MARK and waits there to be killed, so that the test kills it mid-case every time (a rank
#: killed before it joined would leave its peer waiting for the rendezvous's timeout, 120 s).
STALLS = '''
import os, time
from pathlib import Path
import numpy as np
import torch
import torch.distributed as dist
import suites

class StallsOnRank1(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def forward(self, x):
        if dist.is_initialized() and dist.get_rank() == 1:
            mark = Path(os.environ["STALL_MARK"])
            mark.with_suffix(".tmp").write_text(str(os.getpid()))
            mark.with_suffix(".tmp").replace(mark)
            time.sleep(600)
        return self.layers(x)

def data(batch, seed):
    x = np.random.default_rng(seed).standard_normal((batch, 8)).astype(np.float32)
    return x, x.sum(axis=1, keepdims=True)

suites.user_model("stalls_on_rank_1", input_shape=(8,), loss="mse", data=data, torch=StallsOnRank1)
'''


@pytest.fixture
def hosts():
    why = missing()
    if why:
        pytest.skip(why)
    with two_hosts() as made:
        yield made


def start_nodes(hosts, grid: Path, results: Path, *extra: str, env: dict[str, str] | None = None
                ) -> list[subprocess.Popen]:
    """`parbench run` on each host, node 0 at the first host's address."""
    endpoint = f"{hosts.addresses[0]}:{PORT}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return [subprocess.Popen(hosts.command(rank, [
        sys.executable, "-m", "suites", "run", "--suite", str(grid), "--results", str(results / f"node{rank}"),
        "--label", "two-hosts", "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint,
        "--rdzv-timeout", "60", *extra]), cwd=grid.parent, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for rank in range(2)]


def outputs(processes: list[subprocess.Popen], limit_s: float = 600.0) -> list[tuple[int, str]]:
    done = []
    for process in processes:
        output, _ = process.communicate(timeout=limit_s)
        done.append((process.returncode, output))
    return done


def test_a_suite_across_two_hosts_runs_spanning_cases_on_both_and_node_0_keeps_the_records(
        hosts, tmp_path, our_processes):
    grid = tmp_path / "spanning.toml"
    grid.write_text(SPANNING)
    results = tmp_path / "results"
    (code0, out0), (code1, out1) = outputs(start_nodes(hosts, grid, results))
    assert code0 == 0, out0[-3000:]
    assert code1 == 0, out1[-3000:]
    records = records_of(results / "node0")
    assert not (results / "node1").exists()  # the other node keeps nothing
    assert set(records) == {"ddpx2", "multiworkerx2", "singlex1"}
    for name in ("ddpx2", "multiworkerx2"):
        record = records[name]
        assert record["status"] == "ok", (name, record["reason"])
        details = record["details"]
        assert details["launcher"] == "nodes"
        assert sorted(node["node"] for node in details["nodes"]) == ["node0", "node1"]
        assert "one physical host" in details["nodes_share_a_host"]  # namespaces of one machine
        assert record["emulated"]
    assert records["singlex1"]["status"] == "ok" and "nodes" not in records["singlex1"]["details"]
    assert our_processes() == []


def _ranks_on(host_name: str) -> list[int]:
    """The pids of the case processes running in network namespace `host_name`."""
    inside = subprocess.run(["ip", "netns", "pids", host_name], capture_output=True, text=True).stdout.split()
    ranks = []
    for pid in inside:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "suites.runner.case_process" in command:
            ranks.append(int(pid))
    return ranks


def test_a_rank_that_dies_on_the_other_node_fails_that_case_and_the_suite_goes_on(hosts, tmp_path, our_processes):
    grid = tmp_path / "dies.toml"
    grid.write_text(DIES)
    (tmp_path / "stalls.py").write_text(STALLS)
    mark = tmp_path / "rank1-stalled"
    results = tmp_path / "results"
    started = time.monotonic()
    processes = start_nodes(hosts, grid, results,
                            env={"PARBENCH_PLUGINS": str(tmp_path / "stalls.py"), "STALL_MARK": str(mark)})
    while not mark.exists() and time.monotonic() - started < 300 and all(p.poll() is None for p in processes):
        time.sleep(0.1)
    assert mark.exists(), "node 1's rank never reached its first step"
    victim = int(mark.read_text())
    assert victim in _ranks_on(hosts.names[1])  # rank 1 is node 1's, mid-case: past the rendezvous
    os.kill(victim, signal.SIGKILL)
    (code0, out0), (code1, out1) = outputs(processes)
    assert code0 == 1, out0[-3000:]  # a case failed; the run went on to the next one
    assert code1 == 0, out1[-3000:]
    records = records_of(results / "node0")
    assert records["singlex1"]["status"] == "ok"
    reason = records["ddpx2"]["reason"]
    assert records["ddpx2"]["status"] == "failed" and reason.startswith("node 1: rank 1 "), reason
    assert time.monotonic() - started < 300  # well within the case's deadline, not at it
    assert our_processes() == []


def test_nodes_that_run_different_cases_refuse_in_one_line(tmp_path, our_processes):
    """On one host (127.0.0.1): node 1 filtered the suite differently."""
    import socket

    grid = tmp_path / "spanning.toml"
    grid.write_text(SPANNING)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen(
        [sys.executable, "-m", "suites", "run", "--suite", str(grid), "--results", str(tmp_path / f"r{rank}"),
         "--nnodes", "2", "--node-rank", str(rank), "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-timeout", "60",
         *(["--filter", "framework=torch"] if rank == 1 else [])],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(2)]
    for code, output in outputs(processes, 300):
        lines = [line for line in output.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1, output
        assert "differ in cases" in lines[0] and "run the same parbench version" in lines[0], lines[0]
        assert "Traceback" not in output
    assert not (tmp_path / "r0").exists() or not list((tmp_path / "r0").rglob("*.jsonl"))
    assert our_processes() == []


def test_missing_node_arguments_are_one_line(capsys):
    from suites.frontends.cli import main

    assert main(["run", "--suite", "quick", "--nnodes", "2", "--node-rank", "0"]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--nnodes, --node-rank and --rdzv-endpoint together" in error[0], error


# --- node 0's verdict from every node's outcome (fakes) ---------------------------------------------


def span_of_two() -> NodeSpan:
    from types import SimpleNamespace

    return NodeSpan(group=SimpleNamespace(endpoint="10.0.0.1:29400"), nodes=("node0", "node1"),  # type: ignore[arg-type]
                    addresses=("10.0.0.1", "10.0.0.2"), gpus_per_node=0)


def job():
    from suites.cases.case import Case
    from suites.strategies.jobs import job_for

    return job_for(Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 16}))


def failed(reason: str, at: float | None) -> Outcome:
    return Outcome(Status.FAILED, reason, details={FAILED_AT: at} if at is not None else {})


def test_the_failure_first_in_time_is_the_cause_whichever_node_had_it():
    span = span_of_two()
    crashed = failed("rank 1 exited with code -9 before reporting", 100.0)
    broken = failed("rank 0: check: RuntimeError: Connection closed by peer", 100.2)
    outcome = span._outcome_of_nodes(job(), broken, [json.dumps(crashed.to_dict())])
    assert outcome.status is Status.FAILED
    assert outcome.reason == "node 1: rank 1 exited with code -9 before reporting"
    outcome = span._outcome_of_nodes(job(), failed("rank 0: check: ValueError: boom", 99.0),
                                     [json.dumps(broken.to_dict())])
    assert outcome.reason == "node 0: rank 0: check: ValueError: boom"


def test_a_node_that_never_reports_is_named_and_its_later_steps_fail_at_once():
    span = span_of_two()
    outcome = span._outcome_of_nodes(job(), failed("rank 0 did not finish within 90 s (killed)", None), [None])
    assert outcome.reason.startswith("node 1 (10.0.0.2) did not report train_step/torch/cpu:2/ddp")
    later = span.run_step(job(), None, [{}, {}])  # type: ignore[arg-type]  # no step is shared: nothing runs
    assert later.status is Status.FAILED and later.reason.startswith("node 1 (10.0.0.2) left the run: ")


def test_every_node_ok_keeps_node_0s_outcome_with_both_nodes():
    span = span_of_two()
    local = Outcome(Status.OK, details={"node": {"node": "node0", "hostname": "a"}})
    other = Outcome(Status.OK, details={"node": {"node": "node1", "hostname": "b"}})
    outcome = span._outcome_of_nodes(job(), local, [json.dumps(other.to_dict())])
    assert outcome is local and outcome.details["launcher"] == "nodes"
    assert [node["node"] for node in outcome.details["nodes"]] == ["node0", "node1"]
    assert "nodes_share_a_host" not in outcome.details  # two hosts: a real cluster's nodes


def test_cpu_ranks_on_hosts_of_their_own_are_not_emulated_and_on_one_host_they_are():
    from suites.runner.recording import on_nodes_of_their_own

    two_hosts_ = {"nodes": [{"node": "node0", "hostname": "a"}, {"node": "node1", "hostname": "b"}]}
    assert on_nodes_of_their_own(job(), two_hosts_)
    assert not on_nodes_of_their_own(job(), {**two_hosts_, "nodes_share_a_host": "the 2 nodes are one host (a)"})
    assert not on_nodes_of_their_own(job(), {})  # ranks on one machine: emulated devices
