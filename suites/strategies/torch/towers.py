"""torch `towers`: the classic multi-GPU split matmul, in one process.

A `matmul` case's K is cut into one slice per GPU; GPU i computes its partial product
A[:, slice] @ B[slice, :] on a `torch.cuda.Stream` of its own, copies it to pinned host memory
without blocking, and the host adds the partials once every stream has finished — TF `towers`'
split matmul (partials added on the CPU with `tf.add_n`), written with torch's streams
(`suites.frameworks.torch.kernels.TorchMatmul`). Training data parallelism in torch is
`dataparallel` / `ddp`, so this strategy applies to the matmul only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.vocabulary import Strategy
from suites.strategies.base import split_reason
from suites.strategies.requirements import requirement
from suites.strategies.torch.base import TorchHooks, TorchStrategy, a_gpu_per_device, on_cuda_gpus
from suites.workloads.kernels import Matmul

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import torch

    from suites.hardware.devices import DeviceInfo
    from suites.workloads.base import Workload

TOWERS_ON_CPU = ("torch towers splits the matmul over CUDA devices, each computing on its own "
                 "torch.cuda stream; torch has no logical CPU devices to split a CPU into (TF "
                 "towers emulates the split on logical CPU devices)")


on_gpus = on_cuda_gpus("the case is on GPUs: each computes its slice on a torch.cuda stream", TOWERS_ON_CPU,
                       "torch towers splits the matmul over CUDA devices")
enough_gpus = a_gpu_per_device("towers")


@requirement("the matmul's K splits evenly over the GPUs")
def k_splits(job: "Job", device: "DeviceInfo") -> str | None:
    return split_reason(job, "GPUs")


class TowersHooks(TorchHooks):
    """Towers' mechanism: a matmul's K split over the case's GPUs (`SplitsKernels`)."""

    def kernel_cache_shares(self, job: "Job") -> int:
        """Each GPU holds its slice of K: 1/n of the inputs (all of them on one shared GPU)."""
        return 1 if job.strategy.emulated(job) else job.n_devices

    def kernel_devices(self, job: "Job") -> list["torch.device"]:
        """The first `n_devices` visible GPUs."""
        import torch

        return [torch.device("cuda", index) for index in range(job.n_devices)]


class Towers(TorchStrategy):
    strategy = Strategy.TOWERS
    rules = TorchStrategy.rules.but(kinds=frozenset({"kernel"}))
    requirements = (on_gpus, enough_gpus, k_splits)
    hooks = TowersHooks()

    def applies_to(self, workload: type["Workload"]) -> bool:
        return issubclass(workload, Matmul)

    def emulated(self, job: "Job") -> bool:
        """Never: it runs on real GPUs only (on a CPU it is unavailable, not emulated)."""
        return False


PLUGIN = Towers()
