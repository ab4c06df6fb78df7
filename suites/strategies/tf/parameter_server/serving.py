"""A `parameter_server` cluster's serving tasks (workers and parameter servers), and what the
chief reads from them.

What other tasks hold is read through TF itself, so it works across machines: an op placed on a
task's CPU runs in that task's process, so `tf.io.read_file` there reads that process's files —
its own /proc/self/status (peak resident set) and the provenance it wrote at start-up.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.frameworks.tf.cluster import POLL_S, Task, cluster_tasks, read_tf_config, wait_for  # noqa: E402
from suites.records.peak_memory import MemoryPeak  # noqa: E402
from suites.records.provenance import environment  # noqa: E402
from suites.measure.memory_probes import CLEAR_REFS, RESET_HIGH_WATER_MARK, STATUS, MemoryProbe  # noqa: E402
from suites.measure.scratch import shared_temp_dir  # noqa: E402


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
    del server  # the process ends next (`suites.runner.case_process`); TF cannot stop a server


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
