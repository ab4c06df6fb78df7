"""A TF cluster of processes joined by TF_CONFIG (`multiworker`, `parameter_server`): TF_CONFIG
itself, its tasks, and the rendezvous and its timeout. Imports no TensorFlow: the plugins'
rules read TF_CONFIG too.

TF waits for a missing task in C, forever, and a TF server ignores SIGTERM. So every wait here
has a deadline (`rendezvous_timeout_s`): where Python polls (a serving task waiting for its
chief, a chief waiting for its workers and parameter servers) it raises `RendezvousTimeout`;
where TF would block in C (MultiWorkerMirroredStrategy's constructor) the workers `meet` first.
Either way the reason names the tasks that never came. Once the cluster has formed, a
`multiworker` worker's waits for its peers are bounded too (`collective_timeout_s`).
"""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Mapping

from suites import knobs
from suites.errors import UserError
from suites.measure.process_env import CASE_TIMEOUT_ENV

#: Jobs of a TF cluster in rank order: the chief (a ParameterServerStrategy's coordinator),
#: the workers, the parameter servers.
CLUSTER_JOBS = ("chief", "worker", "ps")


def read_tf_config() -> dict[str, Any] | None:
    """TF_CONFIG as a mapping, None where it is not set; a malformed one is a `UserError`."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        if not isinstance(cluster, dict) or task["type"] not in cluster:
            raise KeyError(f"task type {task['type']!r} has no job in the cluster")
        if not 0 <= int(task["index"]) < len(cluster[task["type"]]):
            raise KeyError(f"task index {task['index']} is outside job {task['type']!r}")
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"TF_CONFIG is not a cluster spec with this task in it ({error}); set it to "
                        '{"cluster": {"worker": ["HOST:PORT", ...]}, "task": {"type": "worker", "index": I}}'
                        ) from None
    return config


def tf_config_rank(config: Mapping[str, Any]) -> int:
    """A task's rank: its place in the cluster, jobs in `CLUSTER_JOBS` order."""
    cluster, task = config["cluster"], config["task"]
    rank = 0
    for job in CLUSTER_JOBS:
        if job == task["type"]:
            return rank + int(task["index"])
        rank += len(cluster.get(job, ()))
    raise UserError(f"TF_CONFIG: task type {task['type']!r} is not one of {', '.join(CLUSTER_JOBS)}")


RENDEZVOUS_TIMEOUT_ENV = "PARBENCH_RENDEZVOUS_TIMEOUT_S"
#: Seconds the tasks of a cluster have to meet, as torch's rendezvous (`suites.frameworks.torch.distributed`).
RENDEZVOUS_TIMEOUT_S = 120.0
POLL_S = 0.2


def rendezvous_timeout_s() -> float:
    return knobs.read(RENDEZVOUS_TIMEOUT_ENV) or RENDEZVOUS_TIMEOUT_S


def collective_timeout_s() -> float:
    """How long a worker of a formed cluster may wait in one collective for its peers: the case's
    deadline, which the worker process sets from its timing (`CASE_TIMEOUT_ENV`), else the
    deadline of the default timing. No wait of a case that finishes can be longer, and a
    worker started by hand, which no launcher stops at the deadline, then fails naming the
    timeout instead of waiting forever for a peer that is gone or stuck."""
    seconds = knobs.read(CASE_TIMEOUT_ENV)
    if seconds:
        return float(seconds)
    from suites.cases.timing_config import TimingConfig
    from suites.measure.timing import case_deadline_s

    return case_deadline_s(TimingConfig())


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
    def host(self) -> str:
        """The address's host, lower-case, an IPv6 literal without its brackets."""
        return self.address.rsplit(":", 1)[0].strip("[]").lower()

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
    return tasks_of(config)


def tasks_of(config: Mapping[str, Any]) -> tuple[list[Task], Task]:
    """Every task of a TF_CONFIG's cluster (jobs in `CLUSTER_JOBS` order) and its own task."""
    tasks = [Task(job, index, address) for job in CLUSTER_JOBS
             for index, address in enumerate(config["cluster"].get(job, ()))]
    me = config["task"]
    return tasks, next(t for t in tasks if t.job == me["type"] and t.index == int(me["index"]))


#: Host names that always mean the machine they are used on.
LOCAL_HOSTS = frozenset({"localhost", "::1", "0.0.0.0", "::"})


def is_local_host(host: str) -> bool:
    """Whether `host` names this machine without the network: a loopback address or name, or
    this machine's host name (full or short). No name is resolved: a DNS lookup may hang."""
    own = socket.gethostname().lower()
    return host in LOCAL_HOSTS or host.startswith("127.") or host in (own, own.split(".")[0])


def same_host(a: Task, b: Task) -> bool:
    """Whether two tasks' addresses name the same machine: the same host, or both this one."""
    return a.host == b.host or (is_local_host(a.host) and is_local_host(b.host))


def tasks_beside(tasks: list[Task], me: Task) -> list[Task]:
    """The tasks of the cluster on `me`'s machine, `me` included, by their TF_CONFIG addresses."""
    return [task for task in tasks if same_host(task, me)]


def _missing_reason(missing: list[Task], timeout: float) -> str:
    return (f"rendezvous timed out: {', '.join(t.name for t in missing)} did not come up within "
            f"{timeout:.0f} s; start `parbench worker` with the same --case on each "
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
