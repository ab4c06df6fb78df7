"""The lockstep of a `multiworker` case's worker processes (`WorkerLockstep`)."""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.frameworks.tf.distribute import Lockstep, this_task_index  # noqa: E402


class WorkerLockstep(Lockstep):
    """The lockstep of a multi-worker case.

    Each call is one all-reduce (sum) of a float64 vector with a slot per global replica, in
    which every replica fills only its own slot: no worker leaves before every worker has arrived.

    Its all-reduces time out after `timeout_s` (`CommunicationOptions(timeout_seconds=...)`; None:
    never): a worker whose peer never arrives (stuck, or started by hand for another case) raises
    `tf.errors.DeadlineExceededError` and aborts its collectives, instead of waiting forever in C
    where SIGTERM does not reach it. Its process then fails and exits, and the coordination
    service's heartbeat, which MultiWorkerMirroredStrategy turns on, aborts the collectives of
    the workers waiting for it (UnavailableError). TF spends a watchdog thread, sleeping for the
    whole timeout, on every collective that carries one: these calls carry it (a barrier per
    warm-up step and per timed block of at least `suites.measure.runnable.COORDINATED_BLOCK_S`, and a
    few gathers: some hundreds of threads in a case), the training step's all-reduces do not
    (thousands of threads, started inside the timed steps).
    """

    def __init__(self, strategy: tf.distribute.Strategy, timeout_s: float | None = None) -> None:
        replicas = strategy.num_replicas_in_sync
        #: Replicas are numbered worker by worker, each worker holding this many.
        self._per_worker = max(1, len(strategy.extended.worker_devices))
        self.options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_s)
        options = self.options

        def summed(contribution: tf.Tensor) -> tf.Tensor:
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, contribution,
                                                                  options=options)

        def contribution(value: tf.Tensor) -> tf.Tensor:
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return summed(tf.one_hot(replica, replicas, dtype=tf.float64) * value)

        def contribution_row(row: tf.Tensor) -> tf.Tensor:
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return summed(tf.one_hot(replica, replicas, dtype=tf.float64)[:, None] * row[None, :])

        @tf.function
        def every_replica_value(value: tf.Tensor) -> tf.Tensor:
            return strategy.experimental_local_results(strategy.run(contribution, args=(value,)))[0]

        @tf.function
        def every_replica_row(row: tf.Tensor) -> tf.Tensor:
            return strategy.experimental_local_results(strategy.run(contribution_row, args=(row,)))[0]

        self._every_replica_value = every_replica_value
        self._every_replica_row = every_replica_row

    def gather(self, value: float) -> tuple[float, ...]:
        """Every worker's `value`, in task order."""
        values = self._every_replica_value(tf.constant(value, tf.float64)).numpy()
        return tuple(float(v) for v in values[::self._per_worker])

    def gather_bytes(self, data: bytes) -> list[bytes]:
        """Every worker's `data`, in task order: its length, then its bytes, each through the
        same one-slot-per-replica all-reduce as `gather` (float64 holds a byte exactly)."""
        lengths = [int(length) for length in self.gather(float(len(data)))]
        row = np.zeros(max(lengths), np.float64)
        row[:len(data)] = np.frombuffer(data, np.uint8)
        rows = self._every_replica_row(tf.constant(row)).numpy()[::self._per_worker]
        return [bytes(r[:length].astype(np.uint8)) for r, length in zip(rows, lengths)]

    def machines(self) -> list[dict[str, Any]] | None:
        """Every worker's provenance (its machine, CPU, libraries, ...), in task order."""
        from suites.records.provenance import environment

        rank = this_task_index()
        mine = json.dumps({"task": f"worker {rank}", **environment()}).encode()
        return [json.loads(data) for data in self.gather_bytes(mine)]
