"""A collective's time on a topology: the alpha-beta model with NCCL's ring and tree.

time = latency + bus_factor(op, n) * bytes / bus_bandwidth. The bus factors are nccl-tests' (its
PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast and reduce 1);
the latencies NCCL's own tuning model's (`NcclConstants`: a base latency per algorithm and one per
ring step, on NVLink, PCIe or the network; a multi-node ring all-reduce's latency x 1.9). A ring's
bus bandwidth is that of its slowest hop: a GPU's intra-node link, and across nodes all of a node's
NICs (one ring per NIC, each carrying its share through the node); the tree all-reduce runs at 0.9
of it and crosses log2(nodes) network hops. NCCL picks the faster of the two; so does this.

A topology whose `backend` is "gloo" (host tensors over TCP) has no tree, and prices a reduce-scatter
as the all-reduce gloo runs for it (torch's ProcessGroupGloo::reduce_scatter_tensor_coalesced
all-reduces a copy of the input and keeps its rank's chunk: a 2-rank gloo reduce-scatter of 16 MiB
moved 32 MiB over loopback here, as many as an all-reduce, against 16 MiB for an all-gather). Gloo
runs no device streams, so a collective a strategy issues as a blocking call (FSDP2's) hides
behind nothing (`Topology.streams`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

#: Ops whose bus factor is (n - 1) / n.
GATHER_LIKE = frozenset({"all_gather", "reduce_scatter"})
#: Ops whose bus factor is 1 (a chain through every rank).
CHAIN_LIKE = frozenset({"broadcast", "reduce"})


@dataclass(frozen=True)
class Topology:
    """`per_node` devices in each of `nodes` nodes; bandwidths in GB/s (1e9 B/s), latencies in seconds.

    `intra_gbs`: one device's intra-node link, one direction; `node_gbs`: a node's network bandwidth
    (its NICs together) times the share of line rate the fabric reaches; `*_step_s` a ring step's
    latency on the intra-node link and on the network; `*_tree_s` a tree hop's; `*_base_s` a call's."""

    per_node: int
    nodes: int
    intra_gbs: float
    node_gbs: float
    intra_step_s: float
    net_step_s: float
    ring_base_s: float
    intra_tree_s: float = 0.0
    net_tree_s: float = 0.0
    tree_base_s: float = 0.0
    ring_plateau: float = 1.0
    tree_bandwidth: float = 0.9
    backend: str = "nccl"

    @property
    def ranks(self) -> int:
        return self.per_node * self.nodes

    @property
    def streams(self) -> bool:
        """Whether collectives run on device streams beside the compute (NCCL), so that a blocking
        call returns at once; a host backend (gloo) blocks the compute thread until it is done."""
        return self.backend == "nccl"

    @property
    def bus_gbs(self) -> float:
        """The ring's bus bandwidth: its slowest hop."""
        return self.intra_gbs if self.nodes == 1 else min(self.intra_gbs, self.node_gbs)


def bus_factor(op: str, ranks: int) -> float:
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op in GATHER_LIKE:
        return (ranks - 1) / ranks
    return 1.0


def ring_steps(op: str, ranks: int) -> int:
    """Steps of NCCL's ring (ncclTopoTuneModel's nsteps): all-reduce 2(n-1), gathers n-1, chains n."""
    if op == "all_reduce":
        return 2 * (ranks - 1)
    if op in GATHER_LIKE:
        return ranks - 1
    return ranks


def ring_seconds(op: str, nbytes: float, topology: Topology) -> float:
    n = topology.ranks
    if n == 1 or nbytes <= 0:
        return 0.0
    steps, inter = ring_steps(op, n), ring_steps(op, topology.nodes) if topology.nodes > 1 else 0
    latency = topology.ring_base_s + (steps - inter) * topology.intra_step_s + inter * topology.net_step_s
    if op == "all_reduce" and topology.nodes > 1:
        latency *= topology.ring_plateau
    return latency + bus_factor(op, n) * nbytes / (topology.bus_gbs * 1e9)


def tree_seconds(nbytes: float, topology: Topology) -> float:
    """NCCL's tree all-reduce: up and down the tree (algorithm bandwidth = half the bus bandwidth, x 0.9)."""
    if topology.ranks == 1 or nbytes <= 0:
        return 0.0
    latency = topology.tree_base_s + 2 * ((topology.per_node - 1) * topology.intra_tree_s
                                          + math.log2(topology.nodes) * topology.net_tree_s)
    return latency + 2 * nbytes / (topology.tree_bandwidth * topology.bus_gbs * 1e9)


def collective_seconds(op: str, nbytes: float, topology: Topology) -> tuple[float, str]:
    """(seconds, algorithm) of one collective of `nbytes` per rank; all-reduce the faster of ring and tree
    (NCCL; gloo has only the ring, and runs a reduce-scatter as an all-reduce)."""
    if topology.backend == "gloo" and op == "reduce_scatter":
        return ring_seconds("all_reduce", nbytes, topology), "ring (gloo: all-reduce)"
    ring = ring_seconds(op, nbytes, topology)
    if op != "all_reduce" or topology.ranks == 1 or topology.backend == "gloo":
        return ring, "ring"
    tree = tree_seconds(nbytes, topology)
    return (tree, "tree") if tree < ring else (ring, "ring")


def point_to_point_seconds(nbytes: float, topology: Topology) -> float:
    """One send between neighbouring stages: over the network where stages span nodes."""
    if topology.ranks == 1 or nbytes <= 0:
        return 0.0
    across = topology.nodes > 1
    return ((topology.net_step_s if across else topology.intra_step_s)
            + nbytes / ((topology.node_gbs / topology.per_node if across else topology.intra_gbs) * 1e9))


def push_pull_seconds(nbytes: float, topology: Topology, servers: int = 1) -> float:
    """A parameter server step: every worker pushes `nbytes` of gradients and pulls as many of
    parameters back, all through the servers' host links (a node's network bandwidth each)."""
    if topology.ranks == 1 or nbytes <= 0:
        return 0.0
    link = topology.node_gbs if topology.nodes > 1 else topology.intra_gbs
    return topology.net_step_s + 2 * nbytes * topology.ranks / (servers * link * 1e9)
