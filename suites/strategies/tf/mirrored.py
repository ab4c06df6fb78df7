"""TF `mirrored`: `tf.distribute.MirroredStrategy`, one process, one replica per device.

It all-reduces with NCCL between GPUs; elsewhere it reduces on one device and broadcasts
(`NcclAllReduce` has no CPU kernel; `HierarchicalCopyAllReduce` assumes GPUs linked like a
DGX-1). On a CPU the replicas are logical devices, so a case runs in a fresh process.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.measure.launch import Launch
from suites.strategies.base import on_shared_gpus
from suites.strategies.tf.base import (DistributeStrategy, backend_reason, param,
                                       nccl_bf16_reason, replicas_reason)

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.hardware.devices import DeviceInfo


class Mirrored(DistributeStrategy):
    strategy = Strategy.MIRRORED
    kinds = frozenset({"training", "collective"})
    launch = Launch.ISOLATED
    replicas_in_process = True
    #: Fewer GPUs than replicas: one GPU split into logical GPUs (`suites.frameworks.tf.distribute`).
    shares_gpus = True
    compile_modes = frozenset({Compile.NONE, Compile.XLA})

    def unavailable_reason(self, job: "Job", device: "DeviceInfo") -> str | None:
        what = "MirroredStrategy"
        shared = on_shared_gpus(job, device.count) and param(job, "backend", "auto") == "nccl"
        return (replicas_reason(job, device, what, self.shares_gpus)
                or backend_reason(job, what, ("auto", "nccl"))
                or (shared and f"{what}'s NCCL all-reduce needs a GPU per replica; {device.count} visible "
                               "(backend 'auto' reduces logical GPUs through one)")
                or nccl_bf16_reason(job, what))

    def cross_device_ops(self, job: "Job", backend_name: str = "auto") -> "tf.distribute.CrossDeviceOps":
        case = job.case
        import tensorflow as tf

        from suites.measure.unsupported import Unsupported

        # NCCL needs a physical GPU per replica: logical GPUs split from one reduce through one.
        if backend_name == "nccl" or (backend_name == "auto" and case.device is DeviceKind.GPU
                                      and not self.emulated(job)):
            return tf.distribute.NcclAllReduce()
        if backend_name == "auto":
            return tf.distribute.ReductionToOneDevice()
        raise Unsupported(f"MirroredStrategy has no {backend_name!r} all-reduce")

    def distribute(self, job: "Job", backend_name: str = "auto") -> "tf.distribute.Strategy":
        import tensorflow as tf

        from suites.frameworks.tf.distribute import replica_devices

        return tf.distribute.MirroredStrategy(
            devices=replica_devices(job), cross_device_ops=self.cross_device_ops(job, backend_name))

    def all_reduce_name(self, job: "Job", backend_name: str = "auto") -> str:
        return type(self.cross_device_ops(job, backend_name)).__name__


PLUGIN = Mirrored()
