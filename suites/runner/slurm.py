"""A case across the nodes of a Slurm allocation: one `srun` step per case whose ranks span nodes.

Inside an allocation of several nodes (`salloc -N 2`, or an `sbatch` script), `parbench run` runs
each case whose ranks do not fit on one node as one job step: `srun --nodes K --ntasks P
--multi-prog`, one task per rank, each task the rank's own command line (the environment the
strategy gives that rank, with the rendezvous on the step's first node). A node holds as many
ranks as it has GPUs (a GPU case) or one rank (a CPU case: one process a node, as a CPU cluster
trains). Every other case runs where `parbench run` runs, as it does outside Slurm. A case that
needs more nodes than the allocation has is unavailable, with the count.

The ranks write their outcomes into a folder under the current directory, which Slurm clusters
share between nodes (`/tmp` is not shared); parbench reads them there and removes the folder.
Each rank names its node (`SLURMD_NODENAME`, host name, CPU), so the record keeps every node's
provenance in `details.nodes`; nodes that are one physical host (a test cluster of several
`slurmd` on one machine) are said to be so.

Nothing here imports a framework; it runs only where SLURM_JOB_ID names an allocation of two or
more nodes and `srun` and `scontrol` are on PATH.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from suites.cases.vocabulary import DeviceKind, Status
from suites.runner.execute import Outcome
from suites.measure.scratch import TMPDIR_ENV
from suites.strategies.jobs import Job

#: Environment a rank process reads its node from (set by slurmd for every task).
NODE_ENV = "SLURMD_NODENAME"
#: Seconds srun has to stop its tasks after SIGTERM before it is killed.
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Allocation:
    """The nodes of the Slurm job this process runs in: their names in Slurm's order, the address
    each is reached at, and the GPUs each has (0: none named)."""

    job_id: str
    nodes: tuple[str, ...]
    addresses: tuple[str, ...]
    gpus_per_node: int

    def ranks_per_node(self, job: Job) -> int:
        """How many of the case's ranks one node holds: one per GPU, one for a CPU case."""
        if job.case.device is DeviceKind.GPU:
            return self.gpus_per_node
        return 1


def _scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=True, timeout=30).stdout


def _node_address(node: str) -> str:
    """The node's NodeAddr (where its slurmd listens; the name itself may not resolve)."""
    for field in _scontrol("show", "node", "-o", node).split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    return node


def _gpus_per_node(env: Mapping[str, str]) -> int:
    """SLURM_GPUS_ON_NODE, else SLURM_GPUS_PER_NODE ('8' or 'h100:8'); 0 where neither says."""
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = env.get(name, "").split(":")[-1].split("(")[0]
        if value.isdigit():
            return int(value)
    return 0


#: `allocation` of each Slurm job id asked in this process (scontrol is asked once a job).
_KNOWN: dict[tuple[str, str], Allocation] = {}


def allocation(env: Mapping[str, str] = os.environ) -> Allocation | None:
    """The allocation this process runs in, where it has two or more nodes; else None."""
    if not env.get("SLURM_JOB_ID") or not env.get("SLURM_JOB_NODELIST"):
        return None
    if not env.get("SLURM_JOB_NUM_NODES", "1").isdigit() or int(env["SLURM_JOB_NUM_NODES"]) < 2:
        return None
    if shutil.which("srun") is None or shutil.which("scontrol") is None:
        return None
    key = (env["SLURM_JOB_ID"], env["SLURM_JOB_NODELIST"])
    if key not in _KNOWN:
        nodes = tuple(_scontrol("show", "hostnames", env["SLURM_JOB_NODELIST"]).split())
        _KNOWN[key] = Allocation(env["SLURM_JOB_ID"], nodes, tuple(_node_address(node) for node in nodes),
                                 _gpus_per_node(env))
    return _KNOWN[key]


def nodes_needed(job: Job, where: Allocation, processes: int) -> int:
    """Nodes the case's `processes` ranks take (1: it fits on one node, and runs as outside Slurm)."""
    per_node = where.ranks_per_node(job)
    if per_node <= 0 or processes <= per_node:
        return 1
    return -(-processes // per_node)


def too_few_nodes(job: Job, where: Allocation, processes: int) -> str | None:
    """Why the case cannot run in this allocation, or None."""
    per_node = where.ranks_per_node(job)
    needed = nodes_needed(job, where, processes)
    if needed == 1:
        return None
    if processes % per_node:
        return (f"{processes} ranks do not divide over nodes of {per_node} {job.case.device}(s) each; pick a case "
                f"for a multiple of {per_node} devices")
    if needed > len(where.nodes):
        return (f"needs {needed} nodes of {per_node} {job.case.device}(s) each; the Slurm allocation "
                f"{where.job_id} has {len(where.nodes)} (allocate more: salloc -N {needed})")
    return None


def rank_env_on_nodes(env: Mapping[str, str], rank: int, per_node: int, where: Allocation) -> dict[str, str]:
    """A rank's environment from its strategy (made for one machine) set for the step's nodes:
    torch's rendezvous on the first node and the rank's place on its own node; a TF cluster's
    tasks (TF_CONFIG, in rank order) each at its node's address, a worker's GPU its node's own."""
    placed = dict(env)
    if "MASTER_ADDR" in placed:
        placed["MASTER_ADDR"] = where.addresses[0]
    if "LOCAL_RANK" in placed:
        placed["LOCAL_RANK"] = str(rank % per_node)
    if "LOCAL_WORLD_SIZE" in placed:
        placed["LOCAL_WORLD_SIZE"] = str(per_node)
    if "TF_CONFIG" in placed:
        placed["TF_CONFIG"] = json.dumps(_tf_config_on_nodes(json.loads(placed["TF_CONFIG"]), per_node, where))
        if placed.get("CUDA_VISIBLE_DEVICES"):  # a worker's GPU: one per rank on its node
            placed["CUDA_VISIBLE_DEVICES"] = str(rank % per_node)
    return placed


def _tf_config_on_nodes(config: dict, per_node: int, where: Allocation) -> dict:
    """TF_CONFIG whose tasks (rank r is the r-th task of the cluster, jobs in their order) are on
    the node of their rank, each keeping its port."""
    rank, cluster = 0, {}
    for job, addresses in config["cluster"].items():
        cluster[job] = []
        for address in addresses:
            cluster[job].append(f"{where.addresses[rank // per_node]}:{address.rsplit(':', 1)[1]}")
            rank += 1
    return {**config, "cluster": cluster}


def _rank_script(command: list[str], env: Mapping[str, str]) -> str:
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    return f"#!/bin/sh\n{exports}exec {shlex.join(command)}\n"


def _stop(process: subprocess.Popen) -> None:
    """srun forwards SIGTERM to the step's tasks and ends; killed if it does not."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_step(job: Job, commands: list[list[str]], envs: list[dict[str, str]], where: Allocation,
             deadline_s: float) -> Outcome:
    """The case's ranks as one srun step over the nodes they need; `commands[r]` is rank r's
    worker command, whose `--out` this replaces with the step's shared folder. Rank 0's outcome
    (the first failure, where a rank failed), with every rank's node in `details.nodes`."""
    processes = len(commands)
    per_node = where.ranks_per_node(job)
    nodes = nodes_needed(job, where, processes)
    folder = Path.cwd() / f".parbench-slurm-{where.job_id}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        lines = []
        for rank, (command, env) in enumerate(zip(commands, envs)):
            out = folder / f"rank{rank}.json"
            command = [*command[:command.index("--out")], "--out", str(out)] if "--out" in command else command
            script = folder / f"rank{rank}.sh"
            # the rank's temp folder inside the step's, removed with it even where srun killed the rank
            placed = {**rank_env_on_nodes(env, rank, per_node, where), TMPDIR_ENV: str(folder)}
            script.write_text(_rank_script(command, placed))
            lines.append(f"{rank} sh {script}")
        (folder / "multi-prog.conf").write_text("\n".join(lines) + "\n")
        with open(folder / "srun.log", "wb") as log:
            step = subprocess.Popen(
                ["srun", f"--nodes={nodes}", f"--ntasks={processes}", f"--ntasks-per-node={per_node}",
                 "--kill-on-bad-exit=1", f"--output={folder}/rank%t.log", f"--error={folder}/rank%t.log",
                 "--multi-prog", str(folder / "multi-prog.conf")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            started = time.monotonic()
            try:
                step.wait(timeout=deadline_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _stop(step)
        return _combine(folder, processes, timed_out, step.returncode, time.monotonic() - started, deadline_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _tail(path: Path, lines: int = 30) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []


def _combine(folder: Path, processes: int, timed_out: bool, returncode: int | None, took_s: float,
             deadline_s: float) -> Outcome:
    outcomes: list[Outcome | None] = []
    for rank in range(processes):
        path = folder / f"rank{rank}.json"
        outcomes.append(Outcome.from_dict(json.loads(path.read_text())) if path.exists() else None)
    nodes = [outcome.details.get("node") for outcome in outcomes if outcome is not None]
    failed = [rank for rank, outcome in enumerate(outcomes) if outcome is None or outcome.status is Status.FAILED]
    if not failed:
        primary = outcomes[0]
        assert primary is not None
        primary.details.update(_nodes_details(nodes))
        return primary
    ended = _ended_tasks(folder / "srun.log")
    # the task srun saw end first: its peers failed after it (a peer's "connection reset" is a consequence, and
    # --kill-on-bad-exit stops the rest); then a reported failure; then the lowest rank
    order = list(ended)
    rank = min(failed, key=lambda r: (r not in ended, order.index(r) if r in ended else 0, outcomes[r] is None, r))
    outcome = outcomes[rank]
    if outcome is not None:
        why = f"rank {rank}: {outcome.reason}"
    elif rank in ended:
        why = (f"rank {rank} on {ended[rank][0]} ended without reporting: {ended[rank][1]} (srun stopped the "
               f"step's other ranks)")
    elif timed_out:
        why = f"rank {rank} did not finish within {deadline_s:.0f} s (the srun step was stopped)"
    else:
        why = f"rank {rank} ended without reporting (srun exited with code {returncode} after {took_s:.0f} s)"
    return Outcome(Status.FAILED, why, check=outcome.check if outcome else None, details={
        "rank": rank, "output_tail": _tail(folder / f"rank{rank}.log") or _tail(folder / "srun.log"),
        **(outcome.details if outcome else {}), **_nodes_details(nodes)})


#: srun's line for a task that ended badly: "srun: error: node2: task 1: Killed".
TASK_ENDED = re.compile(r"error: (?P<node>\S+): tasks? (?P<tasks>[\d,-]+): (?P<how>.+)")


def _ended_tasks(log: Path) -> dict[int, tuple[str, str]]:
    """Tasks srun said ended badly, in the order it said so: rank -> (node, how)."""
    ended: dict[int, tuple[str, str]] = {}
    for line in _tail(log, 200):
        match = TASK_ENDED.search(line)
        if not match:
            continue
        for part in match["tasks"].split(","):
            low, _, high = part.partition("-")
            for task in range(int(low), int(high or low) + 1):
                ended.setdefault(task, (match["node"], match["how"].strip()))
    return ended


def _nodes_details(nodes: list[object]) -> dict[str, object]:
    """`details.nodes` (every rank's node, once a node) and whether they share one physical host."""
    seen: dict[str, dict] = {}
    for node in nodes:
        if isinstance(node, dict) and node.get("slurm_node") not in seen:
            seen[str(node.get("slurm_node"))] = node
    listed = list(seen.values())
    details: dict[str, object] = {"launcher": "slurm", "nodes": listed}
    hosts = {node.get("hostname") for node in listed}
    if len(listed) > 1 and len(hosts) == 1:
        details["nodes_share_a_host"] = (f"the {len(listed)} Slurm nodes are one physical host "
                                         f"({hosts.pop()}): emulated nodes, not a cluster's")
    return details


def node_provenance() -> dict[str, object] | None:
    """What a rank says of its node, where Slurm started it: the node's Slurm name, host name and
    CPU model (the record's provenance is the first node's; this keeps every node's)."""
    name = os.environ.get(NODE_ENV)
    if not name:
        return None
    import platform
    import socket

    from suites.hardware.devices import cpu_model

    return {"slurm_node": name, "hostname": socket.gethostname(), "cpu": cpu_model(),
            "python": sys.version.split()[0], "machine": platform.machine()}
