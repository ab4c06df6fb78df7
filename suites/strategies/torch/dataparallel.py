"""torch `dataparallel`: `nn.DataParallel`, one process, one thread per GPU, the module
replicated every step and the batch scattered over the GPUs.

It runs in an isolated worker process, not in parbench's: a replica thread stuck in a CUDA
peer-to-peer copy or an NCCL broadcast would otherwise freeze the whole run, while the
launcher's deadline ends a worker (and its GPU memory goes with the process)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from suites.cases.vocabulary import Strategy
from suites.measure.launch import Launch
from suites.strategies.requirements import requirement
from suites.strategies.torch.base import TorchHooks, TorchStrategy, a_gpu_per_device, on_cuda_gpus
from suites.strategies.exchange_model import Collective, ExchangeModel

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import torch
    from torch import nn

    from suites.hardware.devices import DeviceInfo

#: `devices` keeps the CPU: nn.DataParallel accepts a CPU module and runs it unchanged, which
#: is worth a reason rather than no case at all.
DATAPARALLEL_ON_CPU = ("nn.DataParallel on CPU runs the module unchanged on one device; "
                       "nothing parallel to measure")


def device_ids(job: "Job") -> list[int]:
    """The GPUs nn.DataParallel spreads the case over: the first `n_devices` visible ones."""
    return list(range(job.n_devices))


on_gpus = on_cuda_gpus("the case is on GPUs: nn.DataParallel replicates over CUDA devices", DATAPARALLEL_ON_CPU,
                       "nn.DataParallel replicates a module over CUDA devices")


@requirement("two GPUs or more (over one it calls the module unchanged)")
def two_gpus(job: "Job", device: "DeviceInfo") -> str | None:
    if job.case.n_devices < 2:
        return ("nn.DataParallel over one GPU calls the module unchanged; nothing parallel "
                "to measure (strategy 'single' times that)")
    return None


enough_gpus = a_gpu_per_device("nn.DataParallel")


class DataParallelHooks(TorchHooks):
    """nn.DataParallel's mechanism: the model replicated over the case's GPUs, all of which a
    step waits for."""

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "nn.Module":
        """nn.DataParallel over the case's GPUs; under mixed precision each replica enters
        autocast with the case's dtype itself (`AutocastForward`: DataParallel's replica threads
        would otherwise compute in float16 under a bf16 case)."""
        from torch import nn

        from suites.frameworks.torch.backend import AUTOCAST_DTYPES, AutocastForward

        dtype = AUTOCAST_DTYPES.get(job.precision)
        replicated = model if dtype is None else AutocastForward(model, device.type, dtype)
        return nn.DataParallel(replicated, device_ids=device_ids(job))

    def devices_in_use(self, job: "Job", device: "torch.device") -> list["torch.device"]:
        """Every GPU of the case: each replica's forward and backward run on its own GPU, and
        a timed block ends only when the slowest of them has finished."""
        import torch

        return [torch.device("cuda", index) for index in device_ids(job)]


class DataParallel(TorchStrategy):
    strategy = Strategy.DATAPARALLEL
    # nn.DataParallel: parameters broadcast from device 0 every step, gradients reduced onto it.
    exchange = ExchangeModel((Collective("broadcast", "parameters"), Collective("reduce", "gradients")),
                             source="torch nn.DataParallel docs: module replicated each forward, gradients summed "
                                    "into the original module")
    rules = TorchStrategy.rules.but(
        statistics_split="replicas", launch=Launch.ISOLATED,
        no_sync_statistics=("torch.nn.SyncBatchNorm works under DistributedDataParallel only (one process per "
                            "device); nn.DataParallel's replicas each compute their own"))
    requirements = (on_gpus, two_gpus, enough_gpus)
    hooks = DataParallelHooks()

    def emulated(self, job: "Job") -> bool:
        """Never: it runs on real GPUs only (on a CPU it is unavailable, not emulated)."""
        return False


PLUGIN = DataParallel()
