"""PyTorch specifics shared by every torch implementation: devices, dtypes, sync, precision flags."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Precision

DTYPES = {Precision.FP32: torch.float32, Precision.TF32: torch.float32,
          Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}


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
