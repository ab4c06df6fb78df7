"""PyTorch specifics shared by every torch implementation: devices, dtypes, sync, precision flags."""
from __future__ import annotations

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


def set_matmul_precision(precision: Precision) -> None:
    """fp32 means real fp32 on Ampere+ (TF32 off); tf32 turns TF32 on for matmul and cuDNN."""
    allow = precision is Precision.TF32
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def to_device(array: np.ndarray, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()
