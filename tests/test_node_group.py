"""The nodes of a run across machines without Slurm (suites/runner/node_group.py): they join at node
0's store, agree on node 0's case list or refuse with the first difference, share what node 0
decides, meet at barriers, and every wait ends with one line naming who is missing.

First as threads of this process on 127.0.0.1, then as two hosts: processes in two network
namespaces joined by a veth pair (tests/netns_hosts.py), where the nodes reach each other only by
address, and where torchrun's own c10d rendezvous carries a gloo all-reduce across them.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from suites.errors import UserError
from suites.runner import node_group
from suites.runner.node_group import NodesDisagree, RendezvousError, RendezvousTimeout, first_difference
from tests.netns_hosts import missing, two_hosts

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
CASES = ["torch/ddp/x2", "torch/fsdp/x2", "tf/multiworker/x2"]
#: A bound on waits meant to take a few seconds: generous, for two busy cores.
GENEROUS_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def on_nodes(*nodes: Callable[[], Any], limit_s: float = 60.0) -> list[Any]:
    """Run each node's function in a thread of its own: its result, or the exception it raised."""
    results: list[Any] = [None] * len(nodes)

    def run(index: int) -> None:
        try:
            results[index] = nodes[index]()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            results[index] = error

    threads = [threading.Thread(target=run, args=(index,), daemon=True) for index in range(len(nodes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(limit_s)
    assert not any(thread.is_alive() for thread in threads), "a node still waits"
    return results


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message, message
    return message


# --- threads on 127.0.0.1 --------------------------------------------------------------------------


def test_every_node_gets_node_0s_values():
    endpoint = f"127.0.0.1:{free_port()}"

    def node(rank: int) -> tuple:
        group = node_group.join(endpoint, 2, rank, timeout_s=GENEROUS_S)
        try:
            cases = json.loads(node_group.agree(group, "cases", json.dumps(CASES)))
            again = node_group.agree(group, "cases", json.dumps(CASES[:1]))  # a name agreed twice
            where = node_group.share(group, "case 1 master", "10.0.0.1:29501" if group.is_first else None)
            node_group.barrier(group, "case 1 done")
            return cases, again, where
        finally:
            node_group.close(group)

    results = on_nodes(lambda: node(0), lambda: node(1))
    assert results[0] == results[1] == (CASES, json.dumps(CASES[:1]), "10.0.0.1:29501"), results


def test_a_node_with_other_cases_is_refused_on_every_node():
    endpoint = f"127.0.0.1:{free_port()}"

    def node(rank: int, cases: list[str]) -> str:
        group = node_group.join(endpoint, 2, rank, timeout_s=GENEROUS_S)
        try:
            return node_group.agree(group, "cases", json.dumps(cases))
        finally:
            node_group.close(group, timeout_s=2)

    first, second = on_nodes(lambda: node(0, CASES), lambda: node(1, [CASES[0], "torch/ddp/x4", CASES[2]]))
    assert isinstance(first, NodesDisagree) and isinstance(second, NodesDisagree), (first, second)
    assert isinstance(second, UserError)
    assert one_line(first) == one_line(second)
    assert 'at item 2 of 3: "torch/fsdp/x2" on node 0, "torch/ddp/x4" on node 1' in str(first), first


@pytest.mark.parametrize("first, mine, says", [
    (["a", "b"], ["a", "c"], 'item 2 of 2: "b" on node 0, "c" here'),
    (["a", "b"], ["a"], 'the item count: 2 on node 0, 1 here; the first extra item, on node 0, is "b"'),
    (["a"], ["a", "b\nc"], 'the item count: 1 on node 0, 2 here; the first extra item, here, is "b\\nc"'),
    ({"version": "1.0", "torch": "2.13"}, {"version": "1.1", "torch": "2.13"}, 'key "version": "1.0" on node 0'),
    ("parbench 1.0", "parbench 1.1", 'character 12: "parbench 1.0" on node 0, "parbench 1.1" here'),
])
def test_the_first_difference_is_named_on_one_line(first, mine, says):
    encode = (lambda value: value) if isinstance(first, str) else json.dumps
    text = first_difference(encode(first), encode(mine))
    assert says in text and "\n" not in text, text


def test_node_0_alone_times_out_naming_the_endpoint_and_the_missing_node():
    endpoint = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(RendezvousTimeout) as raised:
        node_group.join(endpoint, 2, 0, timeout_s=3)
    assert time.monotonic() - started < GENEROUS_S
    message = one_line(raised.value)
    assert f"the rendezvous at {endpoint} had 1 of 2 nodes after 3 s" in message, message
    assert "--node-rank 1" in message, message


def test_node_1_alone_cannot_reach_node_0():
    endpoint = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(RendezvousTimeout) as raised:
        node_group.join(endpoint, 2, 1, timeout_s=3)
    assert time.monotonic() - started < GENEROUS_S
    message = one_line(raised.value)
    assert f"could not reach the rendezvous at {endpoint}" in message and "--node-rank 0" in message, message


def test_a_barrier_names_the_node_that_did_not_come():
    endpoint = f"127.0.0.1:{free_port()}"
    joined = threading.Event()

    def first() -> None:
        group = node_group.join(endpoint, 2, 0, timeout_s=GENEROUS_S)
        try:
            node_group.barrier(group, "case 3 done", timeout_s=2)
        finally:
            joined.wait(GENEROUS_S)
            node_group.close(group, timeout_s=5)

    def second() -> None:
        group = node_group.join(endpoint, 2, 1, timeout_s=GENEROUS_S)
        joined.set()
        node_group.close(group)  # leaves without reaching the barrier

    raised, _ = on_nodes(first, second)
    assert isinstance(raised, RendezvousTimeout), raised
    assert "1 of 2 nodes reached case 3 done within 2 s (node 1 did not)" in one_line(raised), raised


def test_a_node_that_refuses_stops_the_others_at_once():
    """Node 1 runs with another --nnodes: it refuses, and node 0 stops with its reason rather than
    waiting out its timeout."""
    endpoint = f"127.0.0.1:{free_port()}"
    first, second = on_nodes(lambda: node_group.join(endpoint, 2, 0, timeout_s=GENEROUS_S),
                             lambda: node_group.join(endpoint, 3, 1, timeout_s=GENEROUS_S))
    reason = "node 0 runs with --nnodes 2 and node 1 with --nnodes 3: give every node the same --nnodes"
    assert isinstance(second, RendezvousError) and one_line(second) == reason, second
    assert isinstance(first, RendezvousError) and not isinstance(first, RendezvousTimeout), first
    assert one_line(first) == f"the run across nodes stopped: node 1: {reason}"


def test_two_nodes_with_one_rank_are_refused():
    """Of three nodes two say --node-rank 1: the second to check in refuses, and the others stop
    with its reason (node 2 never comes, so none of them can have gone on)."""
    endpoint = f"127.0.0.1:{free_port()}"
    results = on_nodes(*(lambda rank=rank: node_group.join(endpoint, 3, rank, timeout_s=GENEROUS_S)
                         for rank in (0, 1, 1)))
    reason = "two nodes run with --node-rank 1: give each node its own --node-rank, 0 to 2"
    assert all(isinstance(result, RendezvousError) for result in results), results
    messages = sorted(one_line(result) for result in results)
    assert messages == sorted([reason] + [f"the run across nodes stopped: node 1: {reason}"] * 2), messages


@pytest.mark.parametrize("endpoint, nnodes, rank, says", [
    ("127.0.0.1", 2, 0, "--rdzv-endpoint needs HOST:PORT, got '127.0.0.1': add the port node 0 listens on"),
    ("127.0.0.1:", 2, 0, "--rdzv-endpoint needs HOST:PORT"),
    ("[::1]", 2, 0, "--rdzv-endpoint needs HOST:PORT"),
    ("127.0.0.1:http", 2, 0, "the port must be a number from 1 to 65535, got 'http'"),
    ("127.0.0.1:70000", 2, 0, "the port must be a number from 1 to 65535"),
    ("127.0.0.1:29400", 1, 0, "--nnodes must be 2 or more for a run across nodes, got 1"),
    ("127.0.0.1:29400", 2, 2, "--node-rank must be 0 to 1 for --nnodes 2, got 2"),
    ("127.0.0.1:29400", 2, -1, "--node-rank must be 0 to 1 for --nnodes 2, got -1"),
    ("203.0.113.7:29400", 2, 0, "but 203.0.113.7 is not an address of this machine: run `--node-rank 0` on"),
])
def test_bad_arguments_are_one_line_errors(endpoint, nnodes, rank, says):
    with pytest.raises(RendezvousError) as raised:
        node_group.join(endpoint, nnodes, rank, timeout_s=3)
    assert isinstance(raised.value, UserError)
    assert says in one_line(raised.value), raised.value


def test_a_port_in_use_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        endpoint = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(RendezvousError) as raised:
            node_group.join(endpoint, 2, 0, timeout_s=3)
    message = one_line(raised.value)
    assert f"node 0 cannot host the rendezvous at {endpoint}" in message and "free port" in message, message


# --- two hosts: network namespaces ----------------------------------------------------------------


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def child_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}


def finish(processes: list[subprocess.Popen], limit_s: float = 120.0) -> list[tuple[int, str]]:
    """Each process's exit status and output (stdout and stderr together)."""
    done = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        done.append((process.returncode, output))
    return done


@pytest.fixture
def namespaced():
    why = missing()
    if why:
        pytest.skip(why)


NODE_SCRIPT = """
import json, sys
from suites.runner import node_group
group = node_group.join(sys.argv[1], 2, int(sys.argv[2]), timeout_s=60)
print("cases", node_group.agree(group, "cases", json.dumps({cases!r})), flush=True)
print("master", node_group.share(group, "case 1 master", sys.argv[1] if group.is_first else None), flush=True)
node_group.close(group)
"""

ALL_REDUCE_SCRIPT = """
import os
from datetime import timedelta
import torch
import torch.distributed as dist
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print("sum", total.item(), "at", os.environ["MASTER_ADDR"], flush=True)
dist.destroy_process_group()
"""


def test_two_hosts_agree_on_node_0s_cases(namespaced, tmp_path, our_processes):
    script = tmp_path / "node.py"
    script.write_text(textwrap.dedent(NODE_SCRIPT.format(cases=CASES)))
    with two_hosts() as hosts:
        endpoint = f"{hosts.addresses[0]}:29400"  # a fresh namespace: every port is free
        processes = []
        for rank in (1, 0):  # node 1 first: it retries until node 0 is up
            processes.append(subprocess.Popen(hosts.command(rank, [sys.executable, str(script), endpoint, str(rank)]),
                                              env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True, cwd=tmp_path))
            time.sleep(0.5)
        for returncode, output in finish(processes):
            assert returncode == 0, output[-3000:]
            assert f"cases {json.dumps(CASES)}\nmaster {endpoint}\n" in output, output[-3000:]
    assert not our_processes()
    assert not set(hosts.names) & namespaces()


def test_torchrun_carries_a_gloo_all_reduce_across_two_hosts(namespaced, tmp_path, our_processes):
    """torchrun's c10d rendezvous across the namespaces. Each namespace has the machine's host
    name, which resolves to no address of either, so: `is_host` says which agent hosts the
    rendezvous store, `--local-addr` is the address the workers' MASTER_ADDR is taken from, and
    GLOO_SOCKET_IFNAME the interface gloo binds to (by the host name it would bind 127.0.0.1)."""
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE_SCRIPT)
    with two_hosts() as hosts:
        processes = [subprocess.Popen(
            hosts.command(rank, [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                                 "--nproc-per-node", "1", "--node-rank", str(rank), "--rdzv-backend", "c10d",
                                 "--rdzv-endpoint", f"{hosts.addresses[0]}:29400", "--rdzv-id", "parbench-test",
                                 "--rdzv-conf", f"timeout=60,is_host={int(rank == 0)}",
                                 "--local-addr", hosts.addresses[rank], str(script)]),
            env=child_env(GLOO_SOCKET_IFNAME=hosts.interfaces[rank]), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, cwd=tmp_path) for rank in (0, 1)]
        for returncode, output in finish(processes):
            assert returncode == 0, output[-3000:]
            assert f"sum 3.0 at {hosts.addresses[0]}" in output, output[-3000:]
    assert not our_processes()
    assert not set(hosts.names) & namespaces()


def test_the_hosts_go_when_the_body_raises(namespaced, our_processes):
    with pytest.raises(RuntimeError, match="the test failed"):
        with two_hosts() as hosts:
            subprocess.Popen(hosts.command(1, ["sleep", "600"]), env=child_env())
            subprocess.Popen(hosts.command(0, [sys.executable, "-c", "import time; time.sleep(600)"]),
                             env=child_env())
            assert set(hosts.names) <= namespaces()
            raise RuntimeError("the test failed")
    assert not our_processes()
    assert not set(hosts.names) & namespaces()
