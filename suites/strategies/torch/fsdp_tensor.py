"""torch `fsdp_tensor`: 2-D parallelism, FSDP across one dimension of a device mesh and tensor
parallelism across the other, one rank process per device.

The case's `mesh = "DPxTP"` lays its devices out as DP rows of TP ranks (row-major: rank r is
tensor-parallel rank r % TP of data-parallel group r // TP). Tensor parallelism (`tensor`'s plan)
splits the layers within each row; then FSDP (`fsdp`'s units) shards every parameter, split or
not, over each column. The TP ranks of a row feed the same shard of the global batch, the DP
groups equal shards, so the averaged first-step gradient, gathered over both dimensions, is the
single-device full-batch gradient the check compares. Mixed precision is FSDP's
`MixedPrecisionPolicy`, as in `fsdp`; fp16 is unavailable (`FP16_UNAVAILABLE`).

A strategy of its own rather than a `mesh` parameter of `fsdp`: its cases split layers, so they
need a tensor-parallel plan, divisible heads and widths and bf16 rather than fp16, and they belong
in a series of their own in reports, apart from pure FSDP's.
"""
from __future__ import annotations

from dataclasses import dataclass
import re
from typing import TYPE_CHECKING, Any, Mapping

from suites.cases.vocabulary import Precision, Strategy
from suites.strategies.options import option
from suites.strategies.requirements import requirement
from suites.strategies.torch.base import RankHooks, RankProcesses
from suites.strategies.torch.fsdp import (RESHARD_HELP, largest_unit, parameter_counts, reshard_of, shard,
                                          sharded_state)
from suites.strategies.torch.tensor import elements_saved, parallelize, plan_problem

if TYPE_CHECKING:
    from suites.cases.vocabulary import DeviceKind
    from suites.strategies.jobs import Job
    import numpy as np
    import torch
    from torch import nn

    from suites.hardware.devices import DeviceInfo

@dataclass(frozen=True)
class FsdpTensorOptions:
    mesh: str = option("2x2", minimum=None,
                       help="DPxTP: FSDP over DP data-parallel groups, tensor parallelism over TP ranks in "
                            "each; DP x TP must be n_devices")
    reshard: bool = option(True, help=RESHARD_HELP, minimum=None)
#: It runs, but would not be right on every step: DTensor agrees on the GradScaler's overflow
#: flag over the mesh dimensions its first gradient is sharded on (torch 2.13,
#: `found_inf_reduce_handler`).
FP16_UNAVAILABLE = (
    "fp16 needs loss scaling, and torch.amp.GradScaler's overflow flag is agreed over the mesh "
    "dimensions the first gradient is sharded on only (DTensor, torch 2.13): a transformer's "
    "first gradient, a LayerNorm's, is sharded over dp alone, so tensor-parallel ranks could "
    "disagree on skipping a step; bf16 needs no loss scaling")


def mesh_of(job: "Job") -> tuple[int, int] | None:
    """(DP, TP) of the case's `mesh`, or None where it is not two positive sizes."""
    match = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)", str(job.options.mesh))
    return (int(match[1]), int(match[2])) if match else None


# --- requirements: the later ones count on a well-formed mesh (`mesh_fits`, checked first) ------
@requirement("`mesh` is DPxTP, two sizes whose product is n_devices")
def mesh_fits(job: "Job", device: "DeviceInfo") -> str | None:
    mesh = mesh_of(job)
    if mesh is None:
        return f"mesh {job.options.mesh!r} is not DPxTP (two sizes, e.g. 2x2)"
    dp, tp = mesh
    if dp * tp != job.case.n_devices:
        return f"mesh {dp}x{tp} is {dp * tp} devices; this case has {job.case.n_devices}"
    return None


@requirement("not fp16: GradScaler's overflow flag is not agreed over every mesh dimension (bf16 needs no scaling)")
def no_fp16(job: "Job", device: "DeviceInfo") -> str | None:
    return FP16_UNAVAILABLE if job.case.precision is Precision.FP16 else None


@requirement("the model has a tensor-parallel plan whose heads and split widths divide over TP")
def plan_fits(job: "Job", device: "DeviceInfo") -> str | None:
    return plan_problem(job, mesh_of(job)[1])  # type: ignore[index]


@requirement("the global batch splits into equal shards over the DP groups")
def equal_group_shards(job: "Job", device: "DeviceInfo") -> str | None:
    split = job.workload.split_problem(mesh_of(job)[0], "data-parallel groups")  # type: ignore[index]
    return split and f"{split} (each FSDP group trains on an equal shard)"


class FsdpTensorHooks(RankHooks):
    """2-D parallelism's mechanism: a DP group's shard of the batch, the layers split over TP and
    sharded over DP in place, mixed precision FSDP's, the gradients gathered for the check."""

    def data_shard(self, job: "Job", rank: int) -> slice:
        """Data-parallel group rank // TP's equal shard of the global batch."""
        dp, tp = mesh_of(job)  # type: ignore[misc]
        size = job.workload.global_batch // dp
        return slice(rank // tp * size, (rank // tp + 1) * size)

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "nn.Module":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, mesh_of(job), mesh_dim_names=("dp", "tp"))
        parallelize(model, mesh["tp"])
        shard(model, mesh["dp"], reshard_of(job), job.precision)
        return model

    def handles_precision(self, job: "Job") -> bool:
        return True

    def gradients(self, model: Any) -> dict[str, "np.ndarray"]:
        return model.canonical_gradients(gather=True)


class FsdpTensor(RankProcesses):
    strategy = Strategy.FSDP_TENSOR
    options_type = FsdpTensorOptions
    requirements = (mesh_fits, no_fp16, *RankProcesses.requirements, plan_fits, equal_group_shards)
    hooks = FsdpTensorHooks()

    def devices_at_hand(self, kind: "DeviceKind", count: int) -> int:
        """An even count of at least four: a DP x TP mesh whose TP is 2 and DP at least 2."""
        return max(4, count - count % 2)

    def sized_for(self, params: Mapping[str, object], n: int) -> dict[str, object]:
        """The mesh n/2 x 2."""
        return {**params, "mesh": f"{n // 2}x2"}

    def state_bytes_per_device(self, job: "Job", parameters: int, optimizer_states: int) -> dict[str, int]:
        """A tensor-parallel rank's share of the model (`tensor`), sharded over the
        data-parallel groups with `fsdp`'s accounting (with `reshard = false`, a full copy of
        that share resident from forward to backward)."""
        dp, tp = mesh_of(job)  # type: ignore[misc]
        saved = elements_saved(job, tp)
        held = {name: count - saved[name] for name, count in parameter_counts(job).items()}
        return sharded_state(parameters - sum(saved.values()), largest_unit(held),
                             optimizer_states, dp, reshard_of(job), job.precision)

    def activation_bytes_per_device(self, job: "Job", activation_bytes: int) -> int | None:
        """Not estimated: every tensor-parallel rank runs its group's whole batch, and only the
        split layers' activations are split (the replicated rest is whole), which the
        data-parallel figure the workload supplies does not say."""
        return None


PLUGIN = FsdpTensor()
