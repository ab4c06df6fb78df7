"""TensorFlow all-reduce across N (logical) devices or N worker processes.

The all-reduce is the strategy's own: `ReplicaContext.all_reduce` inside `strategy.run`, which
MirroredStrategy carries out with its cross-device ops (NcclAllReduce between GPUs,
ReductionToOneDevice elsewhere) and MultiWorkerMirroredStrategy with its collective ops
(CollectiveReduceV2, ring over gRPC or NCCL). That is what a TF training step's gradient
all-reduce costs, rather than a raw op no training loop uses.

Like nccl-tests' in-place test (and the torch all-reduce), each step reduces the previous step's
result; the values grow (to inf after enough steps), which does not change a sum's speed. The
check reduces a fresh buffer holding a replica-dependent integer pattern whose sum is exact.
"""
from __future__ import annotations

import numpy as np

from suites.frameworks.tf import backend  # first: TF's environment before TF loads
import tensorflow as tf

from suites.frameworks.tf.distribute import Lockstep, configure_runtime, gpu_ordinals, synchronize_devices
from suites.records.check import Check
from suites.measure.runnable import COORDINATED_BLOCK_S, Runnable
from suites.measure.capabilities import CoordinatesWorkers
from suites.workloads.collectives import DATA_SEED, PATTERN_PERIOD, Allreduce, expected_sum



class TfAllreduce(Runnable):
    workload: Allreduce
    unsupported_errors = backend.UNSUPPORTED_ERRORS

    def setup(self) -> None:
        self.plugin = self.job.strategy
        self.hooks = self.plugin.hooks
        configure_runtime(self.job)
        self.strategy = self.hooks.distribute(self.job, str(self.p["backend"]))
        self.dtype = backend.DTYPES[self.case.precision]
        self.lockstep = (self.hooks.lockstep(self.job, self.strategy)
                         if isinstance(self.hooks, CoordinatesWorkers) else Lockstep())
        if self.plugin.rules.coordinated:
            self.min_block_s = COORDINATED_BLOCK_S  # processes meet once per timed block
        elements, dtype = self.workload.elements, self.dtype

        def random_buffer(seed: tf.Tensor) -> tf.Tensor:
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.cast(tf.random.stateless_normal((elements,), tf.stack([seed, replica])), dtype)

        self.buffer = tf.function(lambda: self.strategy.run(random_buffer, args=(DATA_SEED,)))()
        # Two functions, traced separately: the check's tracing stays out of the first timed step.
        self._timed_reduce = tf.function(self._reduce)
        self._checked_reduce = tf.function(self._reduce)

    def _reduce(self, buffer: tf.distribute.DistributedValues) -> tf.distribute.DistributedValues:
        def all_reduce(local: tf.Tensor) -> tf.Tensor:
            # identity: a tensor placed on the replica's device; a multi-worker all-reduce takes
            # its destination from it (a function argument has no device)
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(local))

        return self.strategy.run(all_reduce, args=(buffer,))

    def step(self) -> None:
        self.buffer = self._timed_reduce(self.buffer)

    def synchronize(self) -> None:
        synchronize_devices(self.strategy.extended.worker_devices)

    def barrier(self) -> None:
        self.lockstep.barrier()  # timed blocks end when every worker has finished

    def gpu_ordinals(self) -> tuple[int, ...]:
        return gpu_ordinals(self.job)

    def gather(self, value: float) -> tuple[float, ...]:
        return self.lockstep.gather(value)

    def agree(self, value: float) -> float:
        return self.lockstep.agree(value)

    def check(self) -> Check:
        """Every local replica's reduced buffer equals the analytic sum exactly."""
        elements, replicas = self.workload.elements, self.strategy.num_replicas_in_sync
        dtype = self.dtype

        def pattern() -> tf.Tensor:  # check_pattern, drawn on the replica's device
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.cast((replica + tf.range(elements)) % PATTERN_PERIOD, dtype)

        patterns = tf.function(lambda: self.strategy.run(pattern))()
        reduced = self.strategy.experimental_local_results(self._checked_reduce(patterns))
        expected = expected_sum(replicas, elements)
        error = max(float(np.max(np.abs(backend.to_numpy(local) - expected))) for local in reduced)
        collective = self.hooks.all_reduce_name(self.job, str(self.p["backend"]))
        return Check(error == 0.0, "max_abs_err", error, 0.0,
                     f"sum of {replicas} replicas' (replica + i) mod {PATTERN_PERIOD} over {elements} "
                     f"{self.case.precision} elements, {collective}")
