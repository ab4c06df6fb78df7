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
from suites.strategies.requirements import requirement
from suites.strategies.exchange_model import ALL_REDUCE_AFTER_BACKWARD
from suites.strategies.tf.base import (DistributeHooks, DistributeStrategy, backend_requirement, nccl_bf16_requirement,
                                       param, replica_requirements)

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.hardware.devices import DeviceInfo

WHAT = "MirroredStrategy"


@requirement("backend nccl has a physical GPU per replica (logical GPUs split from one reduce through it)")
def nccl_gpu_per_replica(job: "Job", device: "DeviceInfo") -> str | None:
    if on_shared_gpus(job, device.count) and param(job, "backend", "auto") == "nccl":
        return (f"{WHAT}'s NCCL all-reduce needs a GPU per replica; {device.count} visible "
                "(backend 'auto' reduces logical GPUs through one)")
    return None


class MirroredHooks(DistributeHooks):
    def cross_device_ops(self, job: "Job", backend_name: str = "auto") -> "tf.distribute.CrossDeviceOps":
        import tensorflow as tf

        from suites.measure.unsupported import Unsupported

        # NCCL needs a physical GPU per replica: logical GPUs split from one reduce through one.
        if backend_name == "nccl" or (backend_name == "auto" and job.device is DeviceKind.GPU
                                      and not job.strategy.emulated(job)):
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


class Mirrored(DistributeStrategy):
    strategy = Strategy.MIRRORED
    exchange = ALL_REDUCE_AFTER_BACKWARD
    #: Shared GPUs: fewer GPUs than replicas, one GPU split into logical GPUs
    #: (`suites.frameworks.tf.distribute`).
    rules = DistributeStrategy.rules.but(kinds=frozenset({"training", "collective"}), launch=Launch.ISOLATED,
                                         replicas_in_process=True, shares_gpus=True,
                                         compile_modes=frozenset({Compile.NONE, Compile.XLA}))
    requirements = (*replica_requirements(WHAT), backend_requirement(WHAT, ("auto", "nccl")), nccl_gpu_per_replica,
                    nccl_bf16_requirement(WHAT))
    hooks = MirroredHooks()


PLUGIN = Mirrored()
