"""TF `multiworker`: `tf.distribute.MultiWorkerMirroredStrategy`, one worker process per device.

Workers on 127.0.0.1 join through TF_CONFIG with ports picked at run time; every timed block
ends with all workers meeting (barrier to barrier) and every timing decision is rank 0's. The
collective is NCCL on GPUs and ring (gRPC) on CPUs, or as the case's `backend` asks.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from suites.cases.case import Case
from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.strategies.base import Launch
from suites.strategies.tf.base import (TF_BACKENDS, DistributeStrategy, backend_reason,
                                       mirrored_variables_reason, nccl_bf16_reason, replicas_reason)

if TYPE_CHECKING:
    import tensorflow as tf

    from suites.frameworks.tf.distribute import Lockstep
    from suites.kept.devices import DeviceInfo


class MultiWorker(DistributeStrategy):
    strategy = Strategy.MULTIWORKER
    compile_modes = frozenset({Compile.NONE, Compile.XLA})
    kinds = frozenset({"training", "collective"})
    launch = Launch.RANKS
    coordinated = True

    def unavailable_reason(self, case: Case, device: "DeviceInfo") -> str | None:
        what = "MultiWorkerMirroredStrategy"
        return (replicas_reason(case, device, what) or mirrored_variables_reason(case, what)
                or backend_reason(case, what, TF_BACKENDS) or nccl_bf16_reason(case, what))

    def ports_needed(self, case: Case) -> int:
        return self.processes(case)  # one gRPC server per worker

    def rank_env(self, case: Case, rank: int, world_size: int, ports: list[int]) -> dict[str, str]:
        """TF_CONFIG naming every worker and this one's index; on GPUs, one GPU per worker."""
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports[:world_size]]},
                     "task": {"type": "worker", "index": rank}}
        env = {"TF_CONFIG": json.dumps(tf_config)}
        if case.device is DeviceKind.GPU:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            gpus = visible.split(",") if visible else [str(index) for index in range(world_size)]
            env["CUDA_VISIBLE_DEVICES"] = gpus[rank].strip()
        return env

    def implementation(self, case: Case, backend_name: str = "auto") -> "tf.distribute.experimental.CommunicationImplementation":
        import tensorflow as tf

        from suites.run.availability import Unsupported

        implementations = tf.distribute.experimental.CommunicationImplementation
        if backend_name == "auto":
            return implementations.NCCL if case.device is DeviceKind.GPU else implementations.RING
        if backend_name in ("nccl", "ring"):
            return implementations[backend_name.upper()]
        raise Unsupported(f"MultiWorkerMirroredStrategy has no {backend_name!r} collective")

    def distribute(self, case: Case, backend_name: str = "auto") -> "tf.distribute.Strategy":
        """Reads TF_CONFIG (from `rank_env`); blocks until every worker has joined the cluster,
        so the launcher's deadline is the rendezvous timeout."""
        import tensorflow as tf

        options = tf.distribute.experimental.CommunicationOptions(
            implementation=self.implementation(case, backend_name))
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def lockstep(self, case: Case, strategy: "tf.distribute.Strategy | None") -> "Lockstep":
        from suites.frameworks.tf.distribute import WorkerLockstep

        assert strategy is not None
        return WorkerLockstep(strategy)

    def all_reduce_name(self, case: Case, backend_name: str = "auto") -> str:
        return f"CollectiveReduceV2 ({self.implementation(case, backend_name).name.lower()})"


PLUGIN = MultiWorker()
