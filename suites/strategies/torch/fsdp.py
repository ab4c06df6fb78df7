"""torch `fsdp`: fully sharded data parallelism (FSDP2, `torch.distributed.fsdp.fully_shard`),
one rank process per device.

Each block of the model is one FSDP unit, sharded over a 1-D device mesh of every rank, and the
root last. Parameters, gradients and optimizer state are DTensors sharded on dim 0: each rank
holds 1/N of each (ZeRO-3). Before a unit's forward its parameters are all-gathered; with
`reshard = true` they are freed after its forward and gathered again for its backward
(ZeRO-3-like), with `reshard = false` kept until its backward (ZeRO-2-like: no second
all-gather, but the full parameters resident from forward to backward). After a unit's backward its
gradients are reduce-scattered and averaged, so each rank holds its shard of the full-batch
gradient: gathered, what the check compares with the single-device one.

Mixed precision is FSDP's own `MixedPrecisionPolicy` (parameters gathered and computed in
fp16/bf16, gradients reduced in fp32, the model's output in fp32 for the loss), not autocast.
Each rank trains on its shard of the global batch, as in DDP. The optimizer is built after
`wrap`, on the sharded parameters (the runnable does so for every strategy).

A conv net's layout: FSDP2 shards only contiguous parameters, so its convolution kernels are
made contiguous (NCHW) before sharding; the activations stay in the model's memory format
(channels_last by default), and a convolution with a channels_last input runs channels_last
(cuDNN converts the gathered kernel), as torch's own FSDP2 users of conv nets do.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
from typing import TYPE_CHECKING, Any

from suites.cases.vocabulary import Precision, Strategy
from suites.strategies.base import STATE_BYTES, split_reason
from suites.strategies.options import option
from suites.strategies.requirements import requirement
from suites.strategies.torch.base import RankHooks, RankProcesses
from suites.strategies.exchange_model import Collective, ExchangeModel
from suites.workloads.collectives import DTYPE_BYTES

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import numpy as np
    import torch
    from torch import nn
    from torch.distributed.device_mesh import DeviceMesh

    from suites.hardware.devices import DeviceInfo

RESHARD_HELP = ("FSDP: free each unit's gathered parameters after its forward and gather them "
                "again for its backward (true, ZeRO-3-like) or keep them until then (false, "
                "ZeRO-2-like)")


@dataclass(frozen=True)
class FsdpOptions:
    reshard: bool = option(True, help=RESHARD_HELP, minimum=None)


def reshard_of(job: "Job") -> bool:
    return job.options.reshard


def blocks(module: "nn.Module") -> list["nn.Module"]:
    """The FSDP units below `module`: its children that hold parameters, a container's children
    in the container's place (a ModuleList or ModuleDict is never called, so the hooks FSDP puts
    on a unit's forward would never run on it). A module that more than one layer uses (a
    tied token embedding, also the LM head: the model's `tied_modules`) is no unit: it stays
    with the root, gathered from the root's forward to its backward."""
    from torch import nn

    units = []
    tied = getattr(module, "tied_modules", ())
    for name, child in module.named_children():
        if name in tied:
            continue
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            units.extend(blocks(child))
        elif any(True for _ in child.parameters()):
            units.append(child)
    return units


def make_parameters_contiguous(model: "nn.Module") -> None:
    """Lay every parameter of `model` out contiguously (FSDP2 refuses others: "FSDP does not
    support non-contiguous parameters yet", e.g. channels_last conv kernels)."""
    for parameter in model.parameters():
        if not parameter.is_contiguous():
            parameter.data = parameter.data.contiguous()


def shard(model: "nn.Module", mesh: "DeviceMesh", reshard: bool, precision: Precision) -> None:
    """`fully_shard` on each block of `model`, then on `model`, over `mesh` (a 1-D mesh of the
    ranks FSDP shards over); fp16/bf16 through FSDP's `MixedPrecisionPolicy`."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from suites.frameworks.torch.backend import AUTOCAST_DTYPES

    make_parameters_contiguous(model)
    dtype = AUTOCAST_DTYPES.get(precision)
    unit_policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for unit in blocks(model):
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard, mp_policy=unit_policy)
    # The root's output in fp32, as autocast leaves the loss's input. The root is not resharded
    # after its forward (its backward starts at once; what it holds, such as a language model's
    # tied embedding, which both ends use, stays gathered): FSDP2's own advice.
    fully_shard(model, mesh=mesh, reshard_after_forward=False,
                mp_policy=MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32,
                                               output_dtype=torch.float32 if dtype else None))


def largest_unit(counts: dict[str, int]) -> int:
    """Elements of the largest top-level module, from canonical parameter name -> elements:
    the unit FSDP gathers whole (an upper bound where it shards a container's children apart)."""
    units: dict[str, int] = {}
    for name, count in counts.items():
        top = name.split(".", 1)[0]
        units[top] = units.get(top, 0) + count
    return max(units.values(), default=0)


def sharded_state(parameters: int, largest: int, optimizer_states: int, shards: int,
                  reshard: bool, precision: Precision) -> dict[str, int]:
    """One rank's training state at its peak, in bytes, by ZeRO-3's accounting: `parameters`
    elements (the model, or under 2-D a tensor-parallel rank's share of it) sharded over
    `shards` ranks, fp32, for the parameters, their gradients and `optimizer_states` states per
    parameter; plus the gathered parameters resident at the peak, in the compute dtype: with
    reshard, one unit's (`largest`: gathered again for its backward), without, every unit's
    (kept from its forward until its backward). A unit's gathered gradient, alive only until its
    reduce-scatter, is not counted."""
    shard = -(-parameters // shards)
    gathered = (largest if reshard else parameters) * DTYPE_BYTES[precision]
    state = {"parameters": shard * STATE_BYTES + gathered, "gradients": shard * STATE_BYTES,
             "optimizer": optimizer_states * shard * STATE_BYTES}
    return {**state, "total": sum(state.values())}


def parameter_counts(job: "Job") -> dict[str, int]:
    """Canonical parameter name -> elements, of the case's model (empty for a user model,
    whose parameters only its framework knows)."""
    return {name: math.prod(shape) for name, shape in job.workload.model.parameter_shapes().items()}


@requirement("the global batch splits into equal shards over the ranks")
def equal_shards(job: "Job", device: "DeviceInfo") -> str | None:
    split = split_reason(job, "ranks")
    return split and f"{split} (FSDP's ranks each train on an equal shard)"


class FsdpHooks(RankHooks):
    """FSDP's mechanism: the model sharded in place (`shard`), mixed precision its own, the
    gradients gathered for the check."""

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "nn.Module":
        from torch.distributed.device_mesh import init_device_mesh

        shard(model, init_device_mesh(device.type, (job.n_devices,)), reshard_of(job),
              job.precision)
        return model

    def handles_precision(self, job: "Job") -> bool:
        return True

    def gradients(self, model: Any) -> dict[str, "np.ndarray"]:
        return model.canonical_gradients(gather=True)


class Fsdp(RankProcesses):
    strategy = Strategy.FSDP
    # FSDP2 with reshard (the default), per wrapping unit (Zhao et al. 2023, VLDB 16(12), sec. 3-4; torch
    # docs, notes/fsdp "FSDP Prefetch Nuances"): its parameters all-gathered in the compute dtype before its
    # forward and again before its backward, its gradients reduce-scattered in fp32 after its backward.
    # Forward gathers hide behind the forward (the first unit's never: nothing runs before it), backward
    # gathers and reduce-scatters behind the backward (the last unit's gather starts it, the first unit's
    # reduce-scatter ends it). FSDP2 issues them as blocking calls hidden only on device streams.
    exchange = ExchangeModel((
        Collective("all_gather", "parameters", "compute", overlap="forward", per_unit=True, exposed_unit="first",
                   issue="stream"),
        Collective("all_gather", "parameters", "compute", overlap="backward", per_unit=True, exposed_unit="last",
                   issue="stream"),
        Collective("reduce_scatter", "gradients", overlap="backward", per_unit=True, exposed_unit="first",
                   issue="stream")),
        source="torch FSDP2 fully_shard per block: reshard_after_forward=True, MixedPrecisionPolicy("
               "reduce_dtype=float32), unshard_async_op=False; Zhao et al. 2023 (PyTorch FSDP, VLDB); torch "
               "docs notes/fsdp (implicit prefetching on a separate CUDA stream; the 1st all-gather overlaps "
               "nothing)")
    rules = RankProcesses.rules.but(statistics_split="replicas",
                                    no_sync_statistics="SyncBatchNorm is wired to ddp only here (use strategy ddp)")
    options_type = FsdpOptions
    requirements = (*RankProcesses.requirements, equal_shards)
    hooks = FsdpHooks()

    def state_bytes_per_device(self, job: "Job", parameters: int, optimizer_states: int) -> dict[str, int]:
        """`sharded_state` over every rank. With `reshard = false` the parameters count a full
        (compute-dtype) copy besides the shard: what is resident from forward to backward."""
        return sharded_state(parameters, largest_unit(parameter_counts(job)), optimizer_states,
                             job.n_devices, reshard_of(job), job.precision)


PLUGIN = Fsdp()
