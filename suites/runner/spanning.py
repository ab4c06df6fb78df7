"""A case whose ranks span several nodes, whatever started the nodes: a Slurm allocation
(`suites.runner.slurm`) or one `parbench run --nnodes` per node (`suites.runner.nodes`).

Both place ranks alike: a node holds as many ranks as it has GPUs (a GPU case) or one rank (a CPU
case: one process a node, as a CPU cluster trains); a case that fits on one node runs where
`parbench run` runs; one that needs more nodes than there are is unavailable, with the count.
Each rank's environment, made by its strategy for one machine, is set for the nodes: torch's
rendezvous on the first node, a TF cluster's tasks each at its node's address. Each rank names
its node (`NODE_ENV`), so the record keeps every node's provenance in `details.nodes`, and says so
where the nodes are one physical host (a test cluster on one machine).
"""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
from typing import Mapping, Protocol

from suites import knobs
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Compile, DeviceKind
from suites.measure import gpu_cpu_affinity
from suites.runner.execute import Outcome
from suites.strategies.jobs import Job

#: The node a rank process runs on, set by the launcher that placed it (Slurm sets its own,
#: `SLURMD_NODENAME`, which is read where this is not set).
NODE_ENV = "PARBENCH_NODE"
SLURM_NODE_ENV = "SLURMD_NODENAME"
#: A GPU rank's place among its own node's GPUs (its local rank, or a TF worker's), set where its
#: ranks span nodes: the node resolves it into CUDA_VISIBLE_DEVICES from its own visible set
#: (`gpu_of_slot`), which the placing process cannot see.
GPU_SLOT_ENV = "PARBENCH_GPU_SLOT"


class Nodes(Protocol):
    """The nodes a run may spread a case's ranks over, and how it starts them there."""

    #: The nodes' names, the first being the one `parbench run` (node 0) runs on.
    nodes: tuple[str, ...]
    #: The address each node is reached at, in the same order.
    addresses: tuple[str, ...]
    #: GPUs each node has (0: none known).
    gpus_per_node: int
    #: The launcher's name, as records say it ("slurm", "nodes").
    launcher: str

    def ranks_per_node(self, job: Job) -> int: ...

    def name(self) -> str:
        """What the nodes are, for a reason: "the Slurm allocation 7"."""
        ...

    def more_hint(self, needed: int) -> str:
        """How a user gets `needed` nodes: "salloc -N 3"."""
        ...

    def run_step(self, job: Job, timing: TimingConfig, envs: list[dict[str, str]]) -> Outcome:
        """Run rank r with `envs[r]` (already placed on its node) on the nodes; one outcome."""
        ...


def ranks_per_node(job: Job, gpus_per_node: int) -> int:
    """How many of the case's ranks one node holds: one per GPU, one for a CPU case."""
    return gpus_per_node if job.case.device is DeviceKind.GPU else 1


def nodes_needed(job: Job, where: Nodes, processes: int) -> int:
    """Nodes the case's `processes` ranks take (1: it fits on one node, and runs as on one machine)."""
    per_node = where.ranks_per_node(job)
    if per_node <= 0 or processes <= per_node:
        return 1
    return -(-processes // per_node)


def too_few_nodes(job: Job, where: Nodes, processes: int) -> str | None:
    """Why the case cannot run on these nodes, or None."""
    per_node = where.ranks_per_node(job)
    needed = nodes_needed(job, where, processes)
    if needed == 1:
        return None
    if processes % per_node:
        return (f"{processes} ranks do not divide over nodes of {per_node} {job.case.device}(s) each; pick a case "
                f"for a multiple of {per_node} devices")
    if needed > len(where.nodes):
        return (f"needs {needed} nodes of {per_node} {job.case.device}(s) each; {where.name()} has "
                f"{len(where.nodes)} ({where.more_hint(needed)})")
    return None


def rank_env_on_nodes(env: Mapping[str, str], rank: int, per_node: int, where: Nodes) -> dict[str, str]:
    """A rank's environment from its strategy (made for one machine) set for the nodes: torch's
    rendezvous on the first node and the rank's place on its own node; a TF cluster's tasks (TF_CONFIG,
    in rank order) each at its node's address, a worker's GPU its node's own; the rank's node named."""
    placed = dict(env)
    placed[NODE_ENV] = where.nodes[rank // per_node]
    if "MASTER_ADDR" in placed:
        placed["MASTER_ADDR"] = where.addresses[0]
    if "LOCAL_RANK" in placed:
        placed["LOCAL_RANK"] = str(rank % per_node)
    if "LOCAL_WORLD_SIZE" in placed:
        placed["LOCAL_WORLD_SIZE"] = str(per_node)
    if "TF_CONFIG" in placed:
        placed["TF_CONFIG"] = json.dumps(_tf_config_on_nodes(json.loads(placed["TF_CONFIG"]), per_node, where))
        if placed.get("CUDA_VISIBLE_DEVICES"):  # a worker's GPU: its rank's place on its node, among the node's own
            del placed["CUDA_VISIBLE_DEVICES"]
            placed[GPU_SLOT_ENV] = str(rank % per_node)
    return placed


#: Where a compiled case's rank keeps inductor's and Triton's files, by variable: sub-folders of a
#: fresh folder of the rank's own on its node (issue 48 item 8: ranks of two nodes compiled into one
#: folder on the shared filesystem, under its file locks; a folder the user exported is replaced).
COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def compile_cache_env(job: Job, folder: str) -> dict[str, str]:
    """A compiled case's rank's cache folders under `folder` (its own, on its node); nothing for an
    eager case."""
    if job.case.compile is Compile.NONE:
        return {}
    return {name: f"{folder}/{part}" for name, part in COMPILE_CACHES.items()}


def compile_caches_detail(job: Job, where: str, exported: Mapping[str, str]) -> dict[str, str]:
    """The record's word on a compiled case's caches (`details.compile_caches`): each rank's own,
    fresh, `where`, and the folders the user had `exported` that they replaced; nothing for an
    eager case."""
    if job.case.compile is Compile.NONE:
        return {}
    replaced = [f"{name}={exported[name]}" for name in COMPILE_CACHES if exported.get(name)]
    said = f"each rank's own, fresh, {where} ({', '.join(COMPILE_CACHES)}): cold compiles"
    return {"compile_caches": said + (f"; replaced the exported {', '.join(replaced)}" if replaced else "")}


def gpu_of_slot(env: Mapping[str, str], node_visible: str | None) -> dict[str, str]:
    """A rank's environment on its node, its GPU slot (`GPU_SLOT_ENV`) made that node's own GPU:
    the slot-th entry of the node's CUDA_VISIBLE_DEVICES (Slurm's, a user's), else GPU `slot`.
    `suites.runner.slurm` does the same in the rank's shell script, on the node."""
    if GPU_SLOT_ENV not in env:
        return dict(env)
    placed = dict(env)
    slot = int(placed.pop(GPU_SLOT_ENV))
    visible = [gpu.strip() for gpu in node_visible.split(",")] if node_visible else []
    placed["CUDA_VISIBLE_DEVICES"] = visible[slot] if slot < len(visible) else str(slot)
    return placed


def _tf_config_on_nodes(config: dict, per_node: int, where: Nodes) -> dict:
    """TF_CONFIG whose tasks (rank r is the r-th task of the cluster, jobs in their order) are on
    the node of their rank, each keeping its port."""
    rank, cluster = 0, {}
    for job, addresses in config["cluster"].items():
        cluster[job] = []
        for address in addresses:
            cluster[job].append(f"{where.addresses[rank // per_node]}:{address.rsplit(':', 1)[1]}")
            rank += 1
    return {**config, "cluster": cluster}


def nodes_details(nodes: list[object], launcher: str) -> dict[str, object]:
    """`details.nodes` (every rank's node, once a node) and whether they share one physical host."""
    seen: dict[str, dict] = {}
    for node in nodes:
        if isinstance(node, dict) and str(node.get("node")) not in seen:
            seen[str(node.get("node"))] = node
    listed = list(seen.values())
    details: dict[str, object] = {"launcher": launcher, "nodes": listed}
    ranks = sorted(({**{key: node.get(key) for key in RANK_PLACEMENT},
                     **{key: node[key] for key in RANK_REPORTED if key in node}} for node in nodes
                    if isinstance(node, dict) and "rank" in node), key=lambda rank: int(rank["rank"] or 0))
    if ranks:  # each rank's cores and GPUs: what srun or the node gave it
        details["ranks"] = ranks
    hosts = {node.get("hostname") for node in listed}
    if len(listed) > 1 and len(hosts) == 1:
        details["nodes_share_a_host"] = (f"the {len(listed)} nodes are one physical host "
                                         f"({hosts.pop()}): emulated nodes, not a cluster's")
    return details


#: What `details.ranks` keeps of each rank's node entry: where it ran, on which cores and GPUs (and,
#: where it reported one, the UUID of the GPU it computed on: `gpu_uuid`).
RANK_PLACEMENT = ("rank", "node", "cpus", "visible_gpus")
#: What a GPU rank adds where it reported it: the UUID of its GPU and what it did with its CPUs
#: (`suites.measure.gpu_cpu_affinity`: pinned to the GPU's NUMA node, kept, or skipped, and why).
RANK_REPORTED = ("gpu_uuid", "cpu_pinning")


def ranks_share_gpus(details: Mapping[str, object]) -> bool | None:
    """Whether two of a case's ranks computed on one GPU, from the GPU UUIDs its ranks reported on
    their nodes (`details.ranks`); None where a rank reported none (decided from counts then).
    Counts cannot tell: a node whose ranks see 8 GPUs each may still give two of them one GPU (an
    allocation's --gpus-per-task=1 under a visible set the ranks do not all share)."""
    ranks = details.get("ranks")
    if not isinstance(ranks, list) or len(ranks) < 2:
        return None
    held = [(rank.get("node"), rank.get("gpu_uuid")) for rank in ranks if isinstance(rank, dict)]
    if len(held) < len(ranks) or any(uuid is None for _, uuid in held):
        return None
    return len(set(held)) < len(held)


def gpu_uuid_of_this_rank() -> str | None:
    """The UUID of the GPU this rank computes on: its local rank's among the GPUs it sees, round
    robin where it sees fewer (as a torch rank picks its device); a TF worker sees its one GPU."""
    from suites.hardware.devices import cuda_device_uuids

    uuids = cuda_device_uuids()
    if not uuids:
        return None
    local = os.environ.get("LOCAL_RANK", "0")
    return uuids[(int(local) if local.isdigit() else 0) % len(uuids)]


def cpu_ranges(cpus: set[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5", as taskset and Slurm write CPU lists."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in spans)


def node_provenance(on_gpu: bool = False) -> dict[str, object] | None:
    """What a rank says of its node, where a launcher placed it on one: the node's name (and its
    Slurm name), host name and CPU model (the record's provenance is the first node's; this keeps
    every node's), the cores and GPUs this rank was given there and, `on_gpu`, the UUID of the GPU it
    computed on (`gpu_uuid_of_this_rank`) and what it did with its CPUs (`cpu_pinning`)."""
    name = knobs.read(NODE_ENV) or os.environ.get(SLURM_NODE_ENV)
    if not name:
        return None
    from suites.hardware.devices import cpu_model

    slurm = {"slurm_node": os.environ[SLURM_NODE_ENV]} if os.environ.get(SLURM_NODE_ENV) else {}
    pinning = gpu_cpu_affinity.decision()
    gpu = {"gpu_uuid": gpu_uuid_of_this_rank(), **({"cpu_pinning": pinning} if pinning else {})} if on_gpu else {}
    return {"node": name, **slurm, "hostname": socket.gethostname(), "cpu": cpu_model(),
            "python": sys.version.split()[0], "machine": platform.machine(),
            "cpus": cpu_ranges(os.sched_getaffinity(0)), "visible_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            **gpu}
