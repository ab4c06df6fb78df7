"""A TF cluster of processes joined by TF_CONFIG: its tasks, the rendezvous and its timeout,
the life of a serving task, and what the chief reads from the other tasks.

TF waits for a missing task in C, forever, and a TF server ignores SIGTERM. So every wait here
has a deadline (`rendezvous_timeout_s`): where Python polls (a serving task waiting for its
chief, a chief waiting for its workers and parameter servers) it raises `RendezvousTimeout`;
where TF would block in C (MultiWorkerMirroredStrategy's constructor) the workers `meet` first.
Either way the reason names the tasks that never came.

What other tasks hold is read through TF itself, so it works across machines: an op placed on a
task's CPU runs in that task's process, so `tf.io.read_file` there reads that process's files —
its own /proc/self/status (peak resident set) and the provenance it wrote at start-up.
"""
from __future__ import annotations

import json
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites import knobs
from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.kept.memory import MemoryPeak  # noqa: E402
from suites.kept.provenance import environment  # noqa: E402
from suites.run.memory import CLEAR_REFS, RESET_HIGH_WATER_MARK, STATUS, MemoryProbe  # noqa: E402
from suites.run.scratch import shared_temp_dir  # noqa: E402
from suites.strategies.tf.base import CLUSTER_JOBS, read_tf_config  # noqa: E402

RENDEZVOUS_TIMEOUT_ENV = "PARBENCH_RENDEZVOUS_TIMEOUT_S"
#: Seconds the tasks of a cluster have to meet, as torch's rendezvous (`suites.frameworks.torch.distributed`).
RENDEZVOUS_TIMEOUT_S = 120.0
POLL_S = 0.2


def rendezvous_timeout_s() -> float:
    return knobs.read(RENDEZVOUS_TIMEOUT_ENV) or RENDEZVOUS_TIMEOUT_S


class RendezvousTimeout(RuntimeError):
    """Tasks of the cluster did not come up in time."""


@dataclass(frozen=True)
class Task:
    job: str
    index: int
    address: str

    @property
    def name(self) -> str:
        return f"{self.job} {self.index} ({self.address})"

    @property
    def cpu(self) -> str:
        """The task's CPU as a device name: an op placed there runs in the task's process."""
        return f"/job:{self.job}/replica:0/task:{self.index}/device:CPU:0"

    def reachable(self) -> bool:
        host, port = self.address.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
            return True
        except OSError:
            return False


def cluster_tasks() -> tuple[list[Task], Task]:
    """Every task of TF_CONFIG's cluster (jobs in `CLUSTER_JOBS` order) and this process's."""
    config = read_tf_config()
    if config is None:
        raise RuntimeError("TF_CONFIG is not set: this case runs as a cluster of processes "
                           "(parbench's launcher sets it; across machines, set it on each)")
    tasks = [Task(job, index, address) for job in CLUSTER_JOBS
             for index, address in enumerate(config["cluster"].get(job, ()))]
    me = config["task"]
    return tasks, next(t for t in tasks if t.job == me["type"] and t.index == int(me["index"]))


def _missing_reason(missing: list[Task], timeout: float) -> str:
    return (f"rendezvous timed out: {', '.join(t.name for t in missing)} did not come up within "
            f"{timeout:.0f} s; start `python -m suites.worker` with the same --case on each "
            f"task's machine, each with its TF_CONFIG ({RENDEZVOUS_TIMEOUT_ENV} sets the timeout)")


def wait_for(tasks: list[Task], timeout: float | None = None) -> None:
    """Return once every task's server accepts connections; raise `RendezvousTimeout` naming
    those that do not by the deadline."""
    timeout = rendezvous_timeout_s() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    missing = list(tasks)
    while missing:
        missing = [task for task in missing if not task.reachable()]
        if missing and time.monotonic() >= deadline:
            raise RendezvousTimeout(_missing_reason(missing, timeout))
        if missing:
            time.sleep(POLL_S)


def meet(tasks: list[Task], me: Task, timeout: float | None = None) -> None:
    """Before TF starts this task's server: answer on its port with a plain socket, so the
    other tasks see it; wait (`wait_for`) until every other task has answered once; then free
    the port for TF. A task's TF server answers on the same port from then on, so a task that
    looks later still sees it. MultiWorkerMirroredStrategy's constructor waits for every worker
    in C, holding the GIL, where no timeout of ours could reach it: meeting first turns a
    missing worker into a `RendezvousTimeout` naming it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("", int(me.address.rsplit(":", 1)[1])))
        listener.listen()
        wait_for([task for task in tasks if task != me], timeout)
    finally:
        listener.close()


# --- a serving task (a parameter-server cluster's workers and parameter servers) ----------
def provenance_path(task: Task) -> Path:
    """Where a task leaves its provenance for the chief to read (unique per cluster: the
    task's address is in the name)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{task.job}{task.index}-{task.address}")
    return shared_temp_dir() / f"parbench-task-{safe}.json"


def serve() -> None:
    """Run this task's TF server until the chief has come and gone.

    The chief starts its own server when it connects to the cluster, at the address TF_CONFIG
    gives it, and closes it when its process ends: this task serves until that address stops
    answering. A chief that never comes up is a `RendezvousTimeout`.
    """
    tasks, me = cluster_tasks()
    path = provenance_path(me)
    path.write_text(json.dumps({"task": f"{me.job} {me.index}", **environment()}))
    config = read_tf_config()
    assert config is not None
    server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=me.job,
                                  task_index=me.index, protocol="grpc", start=True)
    try:
        (chief,) = [task for task in tasks if task.job == "chief"]
        wait_for([chief])
        while chief.reachable():
            time.sleep(POLL_S)
    finally:
        path.unlink(missing_ok=True)
    del server  # the process ends next (`suites.run.worker`); TF cannot stop a server


def task_provenance(tasks: list[Task]) -> list[dict[str, Any]]:
    """Every serving task's provenance, read on its own machine."""
    found = []
    for task in tasks:
        with tf.device(task.cpu):
            text = tf.io.read_file(str(provenance_path(task)))
        found.append(json.loads(text.numpy().decode()))
    return found


def own_provenance(task: Task) -> dict[str, Any]:
    return {"task": f"{task.job} {task.index}", **environment()}


# --- peak memory of every task ------------------------------------------------------------
def _resident_kib(status: str, field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
    if match is None:
        raise ValueError(f"no {field} in /proc/self/status")
    return int(match.group(1))


def _status(task: Task) -> str:
    with tf.device(task.cpu):
        return tf.io.read_file(str(STATUS)).numpy().decode()


def resident_bytes(tasks: list[Task], field: str = "VmRSS") -> list[int]:
    """Each task's resident set now (VmRSS) or its high-water mark (VmHWM), bytes."""
    return [_resident_kib(_status(task), field) * 1024 for task in tasks]


class ClusterMemoryProbe(MemoryProbe):
    """Peak resident set of every task's process, each read in that process: the kernel's
    high-water mark (VmHWM) reset at `start` (clear_refs) and read at `stop`, beside the
    resident set each had when the case's setup began (`resident_bytes` then). Peaks are
    labelled with the tasks' ranks (chief 0, then workers, then parameter servers)."""

    def __init__(self, tasks: list[Task], baselines: list[int]) -> None:
        self.tasks, self.baselines = tasks, baselines

    def start(self) -> None:
        for task in self.tasks:
            with tf.device(task.cpu):
                tf.io.write_file(str(CLEAR_REFS), RESET_HIGH_WATER_MARK)

    def stop(self) -> list[MemoryPeak]:
        return [MemoryPeak("cpu", 0, peak, None, baseline, rank) for rank, (peak, baseline)
                in enumerate(zip(resident_bytes(self.tasks, "VmHWM"), self.baselines))]
