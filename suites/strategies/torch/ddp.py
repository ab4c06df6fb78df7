"""torch `ddp`: `DistributedDataParallel`, one rank process per device.

Each rank trains on its shard of the global batch; DDP averages the gradients with an
all-reduce during backward, so the first-step gradient equals the single-device full-batch
gradient (what the check compares). On a CPU the ranks share the machine's cores (`emulated`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from suites.cases.vocabulary import Compile, Strategy
from suites.strategies.base import split_reason
from suites.strategies.requirements import requirement
from suites.strategies.torch.base import RankHooks, RankProcesses
from suites.strategies.exchange_model import Collective, ExchangeModel

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import torch
    from torch import nn

    from suites.hardware.devices import DeviceInfo


@requirement("the global batch splits into equal shards over the ranks")
def equal_shards(job: "Job", device: "DeviceInfo") -> str | None:
    split = split_reason(job, "ranks")
    return split and f"{split} (DDP's mean of per-rank means needs equal shards)"


class DdpHooks(RankHooks):
    """DDP's mechanism: the model wrapped in `DistributedDataParallel`, and its step without the
    gradient all-reduce (`SeparatesExchange`)."""

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "nn.Module":
        from torch.nn.parallel import DistributedDataParallel

        # Gradients as views of the all-reduce buckets: no copy into and out of them.
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                       gradient_as_bucket_view=True)

    def local_step(self, wrapped: "nn.Module", step: Callable[[], None]) -> Callable[[], None]:
        """The step under `no_sync`: this rank's compute with no gradient all-reduce."""
        def step_without_all_reduce() -> None:
            with wrapped.no_sync():
                step()

        return step_without_all_reduce


class Ddp(RankProcesses):
    strategy = Strategy.DDP
    # Gradients all-reduced in fp32 buckets of 25 MiB (bucket_cap_mb's default) as the backward pass
    # fills them; the last bucket has no backward left to hide behind.
    exchange = ExchangeModel((Collective("all_reduce", "gradients", overlap="backward"),), unhidden_bytes=25 * 2**20,
                             source="torch DistributedDataParallel docs: bucket_cap_mb=25, all-reduce overlapped "
                                    "with backward")
    # Synchronized statistics: `torch.nn.SyncBatchNorm` on GPUs; on a CPU, which it refuses, the
    # same all-reduce of each layer's statistics (`suites.frameworks.torch.batchnorm`). Inductor:
    # torch.compile of a DDP module splits its graph at the gradient buckets (DDPOptimizer), so
    # the all-reduces still overlap the backward.
    rules = RankProcesses.rules.but(statistics_split="replicas", synchronized_statistics=True,
                                    kinds=frozenset({"training", "collective"}),
                                    compile_modes=frozenset({Compile.NONE, Compile.INDUCTOR}))
    requirements = (*RankProcesses.requirements, equal_shards)
    hooks = DdpHooks()


PLUGIN = Ddp()
