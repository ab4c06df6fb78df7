"""A suite across machines without Slurm: `parbench run --suite S --nnodes N --node-rank R
--rdzv-endpoint HOST:PORT` on every node, HOST being node 0's address.

The nodes join one node group (`suites.runner.node_group`, over torch's TCPStore on node 0) and
agree on the case list and its timing before anything runs: a node with another suite, filter or
parbench version refuses, naming the first difference. Node 0 then runs the suite as on one
machine, with the group as its `Runner`'s nodes (`suites.runner.spanning.Nodes`): a case whose
ranks do not fit on one node becomes a step; node 0 shares the step (the case, its timing, each
node's ranks' environments, placed on the nodes' addresses), every node starts its own ranks, and
node 0 gathers their outcomes and keeps the record, with every node's provenance. The other nodes
only follow steps until node 0 says the suite is done.

Faults: a node whose ranks fail reports it, and the first failure in time names the case's
reason; a node that does not report within the case's deadline is named, and the steps after it
fail at once (the node left the run) while the cases node 0 runs alone go on. A node that stops
(Ctrl-C, a one-line error) tells the others (`node_group.abort`); a follower whose node 0 is gone
stops at its next wait. Every wait has a deadline; every rank process is stopped by the launcher
that started it.
"""
from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import asdict, dataclass, field

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind, Framework, Status
from suites.hardware.devices import discover
from suites.runner import launchers, node_group
from suites.runner.deadline import case_timeout
from suites.runner.execute import FAILED_AT, Outcome
from suites.runner.interfaces import interface_of
from suites.runner.node_group import NodeGroup
from suites.runner.rank_outcomes import NODES, failures, merge
from suites.runner.spanning import gpu_of_slot, nodes_details, nodes_needed, ranks_per_node
from suites.strategies.jobs import Job, job_for

#: Seconds beyond a case's deadline node 0 waits for another node's report (its launcher stops
#: its ranks at the deadline, then reports).
REPORT_GRACE_S = 60.0
#: Seconds node 0, stopping, waits for the other nodes to read why and leave (they look every
#: `node_group.POLL_S` between steps) before its store goes.
ABORT_GRACE_S = 2.0
#: The environment variables that bind a rank's sockets to an interface; set on each node to the
#: interface of its own address where the user has not (a host name that resolves to 127.0.0.1 would
#: otherwise have gloo listen where the other nodes cannot reach it). Gloo's only: NCCL picks its
#: own (its IB/RoCE data path, or the fastest NIC), and forcing it pins NCCL's traffic to the NIC
#: that holds the node's address, often a management one (issue 48 item 7).
SOCKET_INTERFACE_ENVS = ("GLOO_SOCKET_IFNAME",)


@dataclass
class NodeSpan:
    """The nodes of a `parbench run --nnodes` group, as the runner's launch target."""

    group: NodeGroup
    #: Each node's name ("node0", ...) and the address the others reach it at.
    nodes: tuple[str, ...]
    addresses: tuple[str, ...]
    #: GPUs on each node: the fewest any node has.
    gpus_per_node: int
    #: The interface holding this node's address, which its ranks' sockets bind to ("" unknown).
    interface: str = ""
    launcher: str = "nodes"
    #: Nodes that did not report a step: node rank -> why (their later steps fail at once).
    lost: dict[int, str] = field(default_factory=dict)

    def ranks_per_node(self, job: Job) -> int:
        return ranks_per_node(job, self.gpus_per_node)

    def name(self) -> str:
        return f"the node group at {self.group.endpoint}"

    def more_hint(self, needed: int) -> str:
        return f"start it on {needed} nodes: --nnodes {needed}"

    def run_step(self, job: Job, timing: TimingConfig, envs: list[dict[str, str]]) -> Outcome:
        """Node 0's side of a step: share it, run node 0's ranks, gather the other nodes' outcomes."""
        per_node = self.ranks_per_node(job)
        needed = nodes_needed(job, self, len(envs))
        gone = {rank: why for rank, why in self.lost.items() if rank < needed}
        if gone:
            rank, why = min(gone.items())
            return Outcome(Status.FAILED, f"node {rank} ({self.addresses[rank]}) left the run: {why}",
                           details={"launcher": self.launcher})
        node_group.share(self.group, "step", json.dumps({
            "case": job.case.to_dict(), "timing": asdict(timing),
            "envs": {str(rank): envs[rank * per_node:(rank + 1) * per_node] for rank in range(1, needed)}}))
        local = launchers.run_processes(job, timing, [self.bound_here(env) for env in envs[:per_node]])
        reports = node_group.gather(self.group, "outcome", json.dumps(local.to_dict()),
                                    timeout_s=case_timeout(timing, job) + REPORT_GRACE_S) or []
        return self._outcome_of_nodes(job, local, reports[1:needed])

    def bound_here(self, env: dict[str, str]) -> dict[str, str]:
        """A rank's environment on this node: its GPU slot made one of this node's GPUs
        (`spanning.gpu_of_slot`), gloo's sockets on this node's interface where the user set none."""
        env = gpu_of_slot(env, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if not self.interface:
            return env
        return {**{name: self.interface for name in SOCKET_INTERFACE_ENVS if name not in os.environ}, **env}

    def _outcome_of_nodes(self, job: Job, local: Outcome, reports: list[str | None]) -> Outcome:
        """One outcome of the nodes' (`rank_outcomes.merge`), every node's provenance in `details.nodes`: a
        node that did not report is blamed first, and left the run (`lost`); else the first failure in time
        (its peers' broken connections follow from it)."""
        outcomes: list[Outcome | None] = [local, *(Outcome.from_dict(json.loads(text)) if text else None
                                                   for text in reports)]
        nodes = [outcome.details.get("node") for outcome in outcomes if outcome is not None]
        blamed = min(failures(outcomes), default=None, key=lambda rank: _blame_order(outcomes[rank]))
        silent = f"did not report {job.case.id} within its deadline"
        if blamed is not None and outcomes[blamed] is None:
            self.lost[blamed] = silent

        def unreported(rank: int) -> str:
            return (f"node {rank} ({self.addresses[rank]}) {silent}: its parbench stopped or lost the network; "
                    f"node 0: {local.reason or str(local.status)}")

        return merge(outcomes, blamed, unreported, NODES, shared=nodes_details(nodes, self.launcher))


def _blame_order(outcome: Outcome | None) -> tuple[bool, float]:
    """Which of the nodes' failures a step's outcome names: a node that did not report first, then
    the first failure in time (the lower node of two at once: `min` keeps the first)."""
    return (outcome is not None, (outcome.details.get(FAILED_AT) or math.inf) if outcome else 0.0)


def _own_address(group: NodeGroup) -> str:
    """The address this node reaches node 0 from (node 0: the endpoint's host)."""
    if group.is_first:
        return group.endpoint.host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((group.endpoint.host, group.endpoint.port))  # no packet: it only picks the route
        return probe.getsockname()[0]


def _gpus_here() -> int:
    return discover(Framework.TORCH, DeviceKind.GPU).count


def start(endpoint: str, nnodes: int, node_rank: int, timeout_s: float) -> NodeSpan:
    """Join the node group and learn every node's address and GPUs (`node_group.join`)."""
    group = node_group.join(endpoint, nnodes, node_rank, timeout_s)
    address = _own_address(group)
    everyone = node_group.gather(group, "node", json.dumps({"address": address, "gpus": _gpus_here()}))
    if everyone is not None and None in everyone:
        node_group.abort(group, "a node did not say its address")
        raise node_group.RendezvousError(f"node {everyone.index(None)} did not say its address within "
                                         f"{timeout_s:g} s after joining: start the run again on every node")
    shared = json.loads(node_group.share(group, "nodes", json.dumps(
        [json.loads(text) for text in everyone if text] if everyone else None)))
    return NodeSpan(group, tuple(f"node{rank}" for rank in range(nnodes)), tuple(node["address"] for node in shared),
                    min(node["gpus"] for node in shared), interface_of(address) or "")


def agree_on_cases(span: NodeSpan, cases: list[Case], timing: TimingConfig) -> None:
    """Every node runs the same cases under the same timing, or none starts (one line naming the
    first difference)."""
    node_group.agree(span.group, "cases", json.dumps([case.id for case in cases]))
    node_group.agree(span.group, "timing", json.dumps(asdict(timing), sort_keys=True))


def follow(span: NodeSpan, wait_s: float) -> int:
    """A node other than node 0: run this node's ranks of each step node 0 shares, report their
    outcome, until node 0 says the suite is done. `wait_s` bounds the wait for one step (node 0
    may run many cases alone in between). Exit status 0."""
    group = span.group
    while True:
        step = json.loads(node_group.share(group, "step", None, timeout_s=wait_s))
        if step.get("done"):
            break
        mine = step["envs"].get(str(group.node_rank))
        outcome = None
        if mine:
            job = job_for(Case.from_dict(step["case"]))
            timing = TimingConfig(**step["timing"])
            outcome = launchers.run_processes(job, timing, [span.bound_here(env) for env in mine],
                                              first_rank=group.node_rank * len(mine))
        node_group.gather(group, "outcome", json.dumps(outcome.to_dict() if outcome else None))
    node_group.close(group)
    return 0


def finish(span: NodeSpan, error: str | None = None) -> None:
    """End the run on every node: node 0's suite is done, or this node (any) stopped with `error`."""
    if error is not None:
        node_group.abort(span.group, error)
    else:
        node_group.share(span.group, "step", json.dumps({"done": True}))
    # stopped: node 0 keeps the store up a moment, so the others read why rather than a lost connection
    node_group.close(span.group, timeout_s=ABORT_GRACE_S if error else 30.0)
