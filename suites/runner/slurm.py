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
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import DeviceKind
from suites.errors import UserError
from suites.measure.scratch import TMPDIR_ENV
from suites.frameworks.tf.slurm_resolver import SLURM_PORT_ENV, resolver_order_holds
from suites.runner.deadline import case_timeout
from suites.runner.execute import Outcome
from suites.runner.launchers import worker_command
from suites.runner.rank_outcomes import RANKS, failures, merge, outcome_file, read_outcomes
from suites.runner.spanning import (GPU_SLOT_ENV, SLURM_NODE_ENV, compile_cache_env, compile_caches_detail,
                                   nodes_details, nodes_needed, ranks_per_node)
from suites.strategies.jobs import Job

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
    #: CPUs the allocation gives each node (SLURM_CPUS_ON_NODE) and each task, where it asked for
    #: some (SLURM_CPUS_PER_TASK); 0 where Slurm does not say.
    cpus_per_node: int = 0
    cpus_per_task: int = 0
    #: Whether parbench itself runs in a step (`srun -N1 -n1 --overlap parbench run`): its steps then
    #: overlap that one's CPU, or would wait for it.
    in_step: bool = False

    launcher = "slurm"

    def ranks_per_node(self, job: Job) -> int:
        return ranks_per_node(job, self.gpus_per_node)

    def name(self) -> str:
        return f"the Slurm allocation {self.job_id}"

    def more_hint(self, needed: int) -> str:
        return f"allocate more: salloc -N {needed}"

    def run_step(self, job: Job, timing: TimingConfig, envs: list[dict[str, str]]) -> Outcome:
        return run_step(job, timing, envs, self)


def with_tf_resolver(env: dict[str, str], where: Allocation) -> dict[str, str]:
    """A TF cluster task's environment that has it take TF_CONFIG from TF's own
    `SlurmClusterResolver` (`suites.frameworks.tf.slurm_resolver`), where the step's nodes are
    hosts of their own and the resolver numbers the tasks as parbench does; else as it is (nodes of
    one host would get one port for every task, and their Slurm names need not resolve)."""
    if "TF_CONFIG" not in env or len(set(where.addresses)) < len(where.addresses):
        return env
    cluster = json.loads(env["TF_CONFIG"])["cluster"]
    if not resolver_order_holds(cluster):
        return env
    first_port = next(iter(cluster.values()))[0].rsplit(":", 1)[1]
    return {**env, SLURM_PORT_ENV: first_port}


#: Seconds scontrol has to answer.
SCONTROL_TIMEOUT_S = 30


def _scontrol(*args: str) -> str:
    """scontrol's answer; where it fails or does not answer, one line saying so (UserError)."""
    command = shlex.join(["scontrol", *args])
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"`{command}` did not answer within {SCONTROL_TIMEOUT_S} s: the Slurm controller is "
                        f"unreachable; run inside a working allocation, or unset SLURM_JOB_ID to run on this "
                        f"machine alone") from None
    except OSError as error:
        raise UserError(f"`{command}` could not start ({error.strerror}); run inside a working allocation, or "
                        f"unset SLURM_JOB_ID to run on this machine alone") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip() or "no message").splitlines()[-1]
        raise UserError(f"`{command}` failed (exit code {done.returncode}: {said}); run inside a working "
                        f"allocation, or unset SLURM_JOB_ID to run on this machine alone")
    return done.stdout


def _node_address(node: str) -> str:
    """The node's NodeAddr (where its slurmd listens; the name itself may not resolve)."""
    for field in _scontrol("show", "node", "-o", node).split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    return node


def _count(env: Mapping[str, str], name: str) -> int:
    """Slurm's count in `name` ('16', or '16(x2)' per node), 0 where it is not one."""
    value = env.get(name, "").split("(")[0]
    return int(value) if value.isdigit() else 0


def _gpus_per_node(env: Mapping[str, str]) -> int:
    """SLURM_GPUS_ON_NODE, else SLURM_GPUS_PER_NODE ('8' or 'h100:8'); 0 where neither says."""
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = env.get(name, "").split(":")[-1].split("(")[0]
        if value.isdigit():
            return int(value)
    return 0


#: What Slurm sets in every job beside SLURM_JOB_ID, and `allocation` reads.
ALLOCATION_ENV = ("SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES")
#: `allocation` of each Slurm job id asked in this process (scontrol is asked once a job).
_KNOWN: dict[tuple[str, str], Allocation] = {}


def allocation(env: Mapping[str, str] = os.environ) -> Allocation | None:
    """The allocation this process runs in, where it has two or more nodes; else None. A partial
    Slurm environment (a job id without its nodes) is one line (UserError), not a guess."""
    if not env.get("SLURM_JOB_ID"):
        return None
    missing = [name for name in ALLOCATION_ENV if not env.get(name)]
    if missing:
        raise UserError(f"SLURM_JOB_ID is set ({env['SLURM_JOB_ID']}) but {' and '.join(missing)} not: a partial "
                        f"Slurm environment; run inside an allocation (salloc or sbatch), or unset SLURM_JOB_ID to "
                        f"run on this machine alone")
    if not env["SLURM_JOB_NUM_NODES"].isdigit():
        raise UserError(f"SLURM_JOB_NUM_NODES is {env['SLURM_JOB_NUM_NODES']!r}, not a number of nodes; run inside "
                        f"an allocation (salloc or sbatch), or unset SLURM_JOB_ID to run on this machine alone")
    if int(env["SLURM_JOB_NUM_NODES"]) < 2:
        return None
    if shutil.which("srun") is None or shutil.which("scontrol") is None:
        return None
    key = (env["SLURM_JOB_ID"], env["SLURM_JOB_NODELIST"])
    if key not in _KNOWN:
        nodes = tuple(_scontrol("show", "hostnames", env["SLURM_JOB_NODELIST"]).split())
        _KNOWN[key] = Allocation(env["SLURM_JOB_ID"], nodes, tuple(_node_address(node) for node in nodes),
                                 _gpus_per_node(env), _count(env, "SLURM_CPUS_ON_NODE"),
                                 _count(env, "SLURM_CPUS_PER_TASK"), env.get("SLURM_STEP_ID", "").isdigit())
    where = _KNOWN[key]
    if env.get(SLURM_NODE_ENV) != where.nodes[0]:
        raise UserError(off_the_first_node(where, env.get(SLURM_NODE_ENV)))
    return where


def off_the_first_node(where: Allocation, node: str | None) -> str:
    """Why parbench does not run here: it places ranks from the allocation's first node, and this
    process is elsewhere (`salloc -N 2 parbench run` runs it on the host salloc was typed on, where
    every GPU case would be "no gpu" and CPU cases timed on a login node)."""
    here = f"on its node {node}" if node else f"on {socket.gethostname()}, outside its nodes"
    return (f"this process runs in {where.name()} but {here}, not on its first node {where.nodes[0]} (salloc runs "
            f"its command where it was typed): run it there, `srun -N1 -n1 --overlap parbench run ...` inside "
            f"the allocation, or submit it with `parbench slurm --submit`")


#: The rank's GPU slot made its node's own GPU, on the node (`suites.runner.spanning.gpu_of_slot`'s rule):
#: the slot-th entry of the CUDA_VISIBLE_DEVICES srun gives the task there, else GPU `slot`.
GPU_OF_SLOT = f"""gpu=$(printf '%s,' "${{CUDA_VISIBLE_DEVICES-}}" | cut -d, -f$(({GPU_SLOT_ENV} + 1)))
export CUDA_VISIBLE_DEVICES="${{gpu:-${GPU_SLOT_ENV}}}"
unset {GPU_SLOT_ENV}
"""


#: Gloo's sockets on the interface of the node's address, found on the node (`suites.runner.interfaces`),
#: where the user set none; NCCL's are left to NCCL (issue 48 item 7).
GLOO_ON_NODE = """if [ -z "${{GLOO_SOCKET_IFNAME-}}" ]; then
  interface=$({python} -m suites.runner.interfaces {address})
  [ -z "$interface" ] || export GLOO_SOCKET_IFNAME="$interface"
fi
"""


#: A compiled case's rank compiles into a fresh folder of its own in its node's /tmp (the step's
#: folder is on the shared filesystem), removed when the rank ends, even on SIGTERM (issue 48 item 8).
COMPILE_ON_NODE = """cache=$(mktemp -d /tmp/parbench-compile-XXXXXX) || exit 1
trap 'rm -rf "$cache"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
{exports}"""


def _rank_script(command: list[str], env: Mapping[str, str], node_address: str | None = None,
                 compile_caches: Mapping[str, str] | None = None) -> str:
    """A rank's shell script, run by srun on its node: its environment, its GPU slot made one of the
    node's GPUs, gloo's sockets on the interface of `node_address`, its `compile_caches` (variable ->
    folder under `$cache`, `spanning.compile_cache_env`) in a folder made on the node, then its command
    (in a child, where that folder is removed after it)."""
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    own_gpu = GPU_OF_SLOT if GPU_SLOT_ENV in env else ""
    gloo = (GLOO_ON_NODE.format(python=shlex.quote(sys.executable), address=shlex.quote(node_address))
            if node_address else "")
    if not compile_caches:
        return f"#!/bin/sh\n{exports}{own_gpu}{gloo}exec {shlex.join(command)}\n"
    caches = COMPILE_ON_NODE.format(exports="".join(f'export {name}="{folder}"\n'
                                                    for name, folder in compile_caches.items()))
    return f"#!/bin/sh\n{exports}{own_gpu}{gloo}{caches}{shlex.join(command)}\n"


#: NCCL's log of its transport, kept from a GPU step's rank logs (`nccl_transport`), asked for
#: where the user set no NCCL_DEBUG: "NCCL INFO Using network IB" (or Socket).
NCCL_LOG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
NCCL_NETWORK = re.compile(r"NCCL INFO Using network (?P<network>\S+)")


def nccl_transport(logs: list[Path]) -> str | None:
    """The network NCCL used between nodes, as the ranks' logs say ("IB", "Socket"; several
    joined by "/" where ranks differ); None where no log says."""
    said = sorted({match["network"] for log in logs if log.exists()
                   for match in NCCL_NETWORK.finditer(log.read_text(errors="replace"))})
    return "/".join(said) or None


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


def resource_flags(job: Job, where: Allocation) -> list[str]:
    """What each task of the case's step gets, said to srun: since Slurm 22.05 a step inherits no
    --cpus-per-task (each rank would get one CPU: the allocation's per task, else its node's share
    of the node's CPUs), and a GPU rank sees every GPU of its node (--gpus-per-node, --gpu-bind=none:
    under an allocation's --gpus-per-task=1 each would see one while LOCAL_WORLD_SIZE is 8, and fall
    to gloo, emulated); the rank takes its own by LOCAL_RANK (torch) or its slot (TF)."""
    per_node = where.ranks_per_node(job)
    cpus = where.cpus_per_task or (where.cpus_per_node // per_node if per_node else 0)
    flags = [f"--cpus-per-task={cpus}"] if cpus else []
    if job.device is DeviceKind.GPU and where.gpus_per_node:
        flags += [f"--gpus-per-node={where.gpus_per_node}", "--gpu-bind=none"]
    return flags


#: srun's input variables that would give each task of a GPU step one GPU, whatever its flags say.
PER_TASK_GPU_ENV = ("SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK")


def step_flags(job: Job, where: Allocation, processes: int) -> list[str]:
    """srun's flags for the case's step: its ranks over the nodes they need, the resources each task
    gets (`resource_flags`); what `parbench run --rehearse` shows of it."""
    return [f"--nodes={nodes_needed(job, where, processes)}", f"--ntasks={processes}",
            f"--ntasks-per-node={where.ranks_per_node(job)}", *resource_flags(job, where),
            *(["--overlap"] if where.in_step else []), "--kill-on-bad-exit=1"]


def srun_command(job: Job, where: Allocation, processes: int, folder: Path) -> list[str]:
    """The step's srun command line: its flags (`step_flags`), each rank's own command line
    (`--multi-prog`) and log in the step's `folder`."""
    return ["srun", *step_flags(job, where, processes), f"--output={folder}/rank%t.log",
            f"--error={folder}/rank%t.log", "--multi-prog", str(folder / "multi-prog.conf")]


def run_step(job: Job, timing: TimingConfig, envs: list[dict[str, str]], where: Allocation) -> Outcome:
    """The case's ranks as one srun step over the nodes they need, rank r with `envs[r]` (placed on
    its node: `suites.runner.spanning.rank_env_on_nodes`), each writing its outcome into the
    step's folder. Rank 0's outcome (the first failure, where a rank failed), with every rank's
    node in `details.nodes`."""
    processes = len(envs)
    deadline_s = case_timeout(timing, job)
    folder = Path.cwd() / f".parbench-slurm-{where.job_id}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        lines = []
        per_node = where.ranks_per_node(job)
        nccl_log = NCCL_LOG_ENV if job.device is DeviceKind.GPU and "NCCL_DEBUG" not in os.environ else {}
        for rank, env in enumerate(envs):
            command = worker_command(job, timing, outcome_file(folder, rank))
            script = folder / f"rank{rank}.sh"
            # the rank's temp folder inside the step's, removed with it even where srun killed the rank
            env = {**nccl_log, **with_tf_resolver(env, where), TMPDIR_ENV: str(folder)}
            script.write_text(_rank_script(command, env, where.addresses[rank // per_node],
                                           compile_cache_env(job, "$cache")))
            lines.append(f"{rank} sh {script}")
        (folder / "multi-prog.conf").write_text("\n".join(lines) + "\n")
        with open(folder / "srun.log", "wb") as log:
            srun_env = {name: value for name, value in os.environ.items()
                        if job.device is not DeviceKind.GPU or name not in PER_TASK_GPU_ENV}
            step = subprocess.Popen(srun_command(job, where, processes, folder), env=srun_env,
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            started = time.monotonic()
            try:
                step.wait(timeout=deadline_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _stop(step)
        outcome = _outcome_of_step(folder, processes, timed_out, step.returncode, time.monotonic() - started,
                                   deadline_s)
        outcome.details.update(compile_caches_detail(job, "in /tmp of its node", os.environ))
        return outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _tail(path: Path, lines: int = 30) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []


def _outcome_of_step(folder: Path, processes: int, timed_out: bool, returncode: int | None, took_s: float,
                     deadline_s: float) -> Outcome:
    """One outcome of the step's ranks (`rank_outcomes.merge`), every rank's node in `details.nodes`."""
    outcomes = read_outcomes(folder, processes)
    nodes = [outcome.details.get("node") for outcome in outcomes if outcome is not None]
    ended = _ended_tasks(folder / "srun.log")
    # the task srun saw end first: its peers failed after it (a peer's "connection reset" is a consequence, and
    # --kill-on-bad-exit stops the rest); then a reported failure; then the lowest rank
    order = list(ended)
    blamed = min(failures(outcomes), default=None, key=lambda r: (
        r not in ended, order.index(r) if r in ended else 0, outcomes[r] is None, r))

    def unreported(rank: int) -> str:
        if rank in ended:
            return (f"rank {rank} on {ended[rank][0]} ended without reporting: {ended[rank][1]} (srun stopped the "
                    f"step's other ranks)")
        if timed_out:
            return f"rank {rank} did not finish within {deadline_s:.0f} s (the srun step was stopped)"
        return f"rank {rank} ended without reporting (srun exited with code {returncode} after {took_s:.0f} s)"

    shared = nodes_details(nodes, "slurm")
    transport = nccl_transport([folder / f"rank{rank}.log" for rank in range(processes)])
    if transport:
        shared["nccl_transport"] = transport
    return merge(outcomes, blamed, unreported, RANKS,
                 lambda rank: {"output_tail": _tail(folder / f"rank{rank}.log") or _tail(folder / "srun.log")},
                 shared)


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
