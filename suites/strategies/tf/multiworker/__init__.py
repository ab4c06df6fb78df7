"""TF `multiworker`: `tf.distribute.MultiWorkerMirroredStrategy`, one worker process per device.

Workers on 127.0.0.1 join through TF_CONFIG with ports picked at run time; every timed block
ends with all workers meeting (barrier to barrier) and every timing decision is rank 0's. The
collective is NCCL on GPUs and ring (gRPC) on CPUs, or as the case's `backend` asks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.strategies.exchange_model import ALL_REDUCE_AFTER_BACKWARD
from suites.strategies.tf.base import (TF_BACKENDS, ClusterStrategy, DistributeHooks, backend_requirement,
                                       nccl_bf16_requirement, replica_requirements)

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.frameworks.tf.distribute import Lockstep

WHAT = "MultiWorkerMirroredStrategy"


class MultiWorkerHooks(DistributeHooks):
    """The workers' mechanism: MultiWorkerMirroredStrategy, and how the workers meet
    (`CoordinatesWorkers`)."""

    def implementation(self, job: "Job",
                       backend_name: str = "auto") -> "tf.distribute.experimental.CommunicationImplementation":
        import tensorflow as tf

        from suites.measure.unsupported import Unsupported

        implementations = tf.distribute.experimental.CommunicationImplementation
        if backend_name == "auto":
            return implementations.NCCL if job.device is DeviceKind.GPU else implementations.RING
        if backend_name in ("nccl", "ring"):
            return implementations[backend_name.upper()]
        raise Unsupported(f"MultiWorkerMirroredStrategy has no {backend_name!r} collective")

    def distribute(self, job: "Job", backend_name: str = "auto") -> "tf.distribute.Strategy":
        """Reads TF_CONFIG (from `rank_env`, or the user's on each machine). The workers meet
        first, with the rendezvous timeout (`suites.frameworks.tf.cluster.meet`): the strategy's
        constructor would wait for a missing worker forever. Once formed, a worker that dies is
        noticed by the coordination service's heartbeat (on by default: its peers' collectives
        fail with UnavailableError), and the lockstep's collectives time out at the case's
        deadline (`lockstep`). The strategy's own collectives, the training step's, carry no
        timeout: TF would spend a thread per collective on it (`WorkerLockstep`)."""
        import tensorflow as tf

        from suites.frameworks.tf.cluster import cluster_tasks, meet

        options = tf.distribute.experimental.CommunicationOptions(
            implementation=self.implementation(job, backend_name))
        meet(*cluster_tasks())
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def lockstep(self, job: "Job", strategy: "tf.distribute.Strategy | None") -> "Lockstep":
        """The workers' lockstep, whose waits for a peer end at the case's deadline
        (`suites.frameworks.tf.cluster.collective_timeout_s`)."""
        from suites.frameworks.tf.cluster import collective_timeout_s
        from suites.strategies.tf.multiworker.lockstep import WorkerLockstep

        assert strategy is not None
        return WorkerLockstep(strategy, collective_timeout_s())

    def all_reduce_name(self, job: "Job", backend_name: str = "auto") -> str:
        return f"CollectiveReduceV2 ({self.implementation(job, backend_name).name.lower()})"


class MultiWorker(ClusterStrategy):
    strategy = Strategy.MULTIWORKER
    exchange = ALL_REDUCE_AFTER_BACKWARD
    rules = ClusterStrategy.rules.but(compile_modes=frozenset({Compile.NONE, Compile.XLA}),
                                      kinds=frozenset({"training", "collective"}))
    requirements = (*replica_requirements(WHAT), backend_requirement(WHAT, TF_BACKENDS), nccl_bf16_requirement(WHAT))
    hooks = MultiWorkerHooks()

    def cluster_jobs(self, job: "Job") -> dict[str, int]:
        return {"worker": job.n_devices}


PLUGIN = MultiWorker()
