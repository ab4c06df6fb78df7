"""Synchronised batch norm for torch rank processes: statistics over every rank's samples.

On GPUs this is `torch.nn.SyncBatchNorm` (`convert_sync_batchnorm`). SyncBatchNorm refuses
CPU tensors ("expected input tensor to be on GPU"), so on a CPU each batch norm becomes
`AllReduceBatchNorm`: the computation of Keras' synchronized batch norm (TF
`_compute_moments_sync`) in torch — each rank's per-channel sum, sum of squares and sample
count, summed over the ranks with a differentiable all-reduce (`torch.distributed.nn`, whose
backward all-reduces the gradients), then mean and biased variance E[x^2] - E[x]^2 in float32
(float64 for float64 inputs). Either way the parameters are the model's own, so the optimizer
and the gradient check see the same tensors.
"""
from __future__ import annotations

import torch
from torch import nn

LOCAL = "local: each rank's own statistics (nn.BatchNorm2d)"
SYNC_GPU = "sync: torch.nn.SyncBatchNorm"
SYNC_CPU = ("sync: all-reduce of per-rank sums, sums of squares and counts "
            "(torch.distributed.nn.functional.all_reduce; SyncBatchNorm has no CPU path)")


class AllReduceBatchNorm(nn.Module):
    """Training-mode batch norm over the samples of every rank of the default process group,
    with `batch_norm`'s own scale and shift parameters and epsilon."""

    def __init__(self, batch_norm: nn.BatchNorm2d) -> None:
        super().__init__()
        self.weight, self.bias, self.eps = batch_norm.weight, batch_norm.bias, batch_norm.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.nn.functional import all_reduce

        stats_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        wide = x.to(stats_dtype)
        channels = wide.shape[1]
        count = torch.full((1,), float(wide.numel() // channels), dtype=stats_dtype, device=x.device)
        local = torch.cat([wide.sum(dim=(0, 2, 3)), (wide * wide).sum(dim=(0, 2, 3)), count])
        total = all_reduce(local)
        mean = total[:channels] / total[-1]
        variance = torch.clamp(total[channels:2 * channels] / total[-1] - mean * mean, min=0.0)
        scale = torch.rsqrt(variance + self.eps) * self.weight.to(stats_dtype)
        shift = self.bias.to(stats_dtype) - mean * scale
        return (wide * scale[None, :, None, None] + shift[None, :, None, None]).to(x.dtype)


def synchronize_batch_norm(model: nn.Module, device: torch.device) -> str:
    """Swap every `nn.BatchNorm2d` of `model` (in place, parameters kept) for a synchronised
    one; returns what it used, for the record's details."""
    if device.type == "cuda":
        nn.SyncBatchNorm.convert_sync_batchnorm(model)
        return SYNC_GPU
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.BatchNorm2d):
                setattr(parent, name, AllReduceBatchNorm(child))
    return SYNC_CPU
