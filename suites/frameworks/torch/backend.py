"""PyTorch specifics shared by every torch implementation: devices, dtypes, sync, precision flags."""
from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch
from torch import nn

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Precision

DTYPES = {Precision.FP32: torch.float32, Precision.TF32: torch.float32,
          Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}
#: The dtype `torch.autocast` computes in for each mixed precision; fp32 and tf32 use none.
AUTOCAST_DTYPES = {Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}


def device_for(case: Case, index: int = 0) -> torch.device:
    if case.device is DeviceKind.GPU:
        return torch.device("cuda", index)
    if case.device is DeviceKind.CPU:
        return torch.device("cpu")
    raise ValueError(f"torch has no {case.device} backend in parbench (torch_xla is not supported)")


def synchronize(device: torch.device) -> None:
    """Wait for queued work: CUDA kernels run asynchronously to the host."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release_device_memory(owner: object, attributes: Iterable[str],
                          device: torch.device | None) -> None:
    """At a runnable's teardown: drop `owner`'s references to its device state (`attributes`),
    then, on CUDA, hand the caching allocator's free blocks back to the driver, so the next
    in-process case, and the rank processes of the next launched case, find the GPU's memory
    free rather than held by this process's cache. Only blocks no tensor uses can be released,
    hence the references go first. On the CPU the references go and nothing else happens."""
    for name in attributes:
        vars(owner).pop(name, None)
    if device is not None and device.type == "cuda":
        gc.collect()  # tensors kept alive only by reference cycles (autograd graphs, closures)
        torch.cuda.empty_cache()


class AutocastForward(nn.Module):
    """`module` whose forward runs under `torch.autocast(device_type, dtype)` wherever it is
    called from.

    A wrapper that calls its module from threads of its own loses the caller's autocast dtype:
    `nn.DataParallel`'s `parallel_apply` re-enters autocast in each replica thread with only
    `enabled=` (torch 2.13, `torch/nn/parallel/parallel_apply.py`), so the replicas compute in
    the device type's default dtype (float16 on CUDA) whatever the caller asked for. Wrapped in
    this, each replica's forward enters autocast with the case's dtype itself, and the nested
    autocast overrides the thread's.
    """

    def __init__(self, module: nn.Module, device_type: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.module = module
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.module(*inputs, **kwargs)
@dataclass(frozen=True)
class Flags:
    """The process-wide torch settings a case changes, so that its teardown can put them back:
    an in-process tf32 case must not leave TF32 on for the fp32 cases after it.

    TF32 goes through `torch.set_float32_matmul_precision` and `torch.backends.cudnn.allow_tf32`.
    torch 2.9+ also has per-backend `fp32_precision` attributes, but in torch 2.13 setting
    those leaves `torch.get_float32_matmul_precision()` raising "mix of the legacy and new
    APIs", which torch.compile's inductor calls; these two keep every reading consistent.
    """

    matmul_precision: str
    cudnn_tf32: bool
    cudnn_benchmark: bool

    @classmethod
    def current(cls) -> "Flags":
        return cls(torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32,
                   torch.backends.cudnn.benchmark)

    def restore(self) -> None:
        torch.set_float32_matmul_precision(self.matmul_precision)
        torch.backends.cudnn.allow_tf32 = self.cudnn_tf32
        torch.backends.cudnn.benchmark = self.cudnn_benchmark


def set_matmul_precision(precision: Precision) -> None:
    """fp32 means real fp32 on Ampere+ (TF32 off); tf32 turns TF32 on for matmul and cuDNN."""
    tf32 = precision is Precision.TF32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32


def configure(case: Case) -> Flags:
    """Set the case's precision flags and, on a GPU, cuDNN autotuning; returns the flags as they
    were, for teardown to restore.

    TF autotunes its cuDNN convolutions by default; torch does only with `cudnn.benchmark`, so
    without it the torch-vs-TF convolution comparison is skewed. The tuning happens in the first
    calls of each shape, which warm-up absorbs.
    """
    saved = Flags.current()
    set_matmul_precision(case.precision)
    if case.device is DeviceKind.GPU:
        torch.backends.cudnn.benchmark = True
    return saved


def flag_details(case: Case) -> dict[str, Any]:
    """What a GPU case's record says about cuDNN autotuning (as `configure` set it)."""
    if case.device is not DeviceKind.GPU:
        return {}
    return {"cudnn_autotune": torch.backends.cudnn.benchmark}


def to_device(array: np.ndarray, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()
