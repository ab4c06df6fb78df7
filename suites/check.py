"""Numerics checks: did a case compute the right thing? Stored beside every timing."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .vocabulary import Precision

#: Normwise relative error allowed per precision for kernels: max|out - ref| / max|ref|.
#: Rounding the inputs alone costs ~2^-11 in fp16/tf32 and ~2^-8 in bf16.
KERNEL_TOLERANCE: dict[Precision, float] = {
    Precision.FP32: 1e-4,
    Precision.TF32: 1e-2,
    Precision.FP16: 1e-2,
    Precision.BF16: 4e-2,
}


@dataclass(frozen=True)
class Check:
    passed: bool
    metric: str
    value: float
    tolerance: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Check":
        return cls(**data)

    def __str__(self) -> str:
        verdict = "pass" if self.passed else "FAIL"
        return f"{verdict} ({self.metric}={self.value:.2e} <= {self.tolerance:.0e})" if self.passed \
            else f"{verdict} ({self.metric}={self.value:.2e} > {self.tolerance:.0e})"


def normwise_relative_error(output: np.ndarray, reference: np.ndarray) -> float:
    output = np.asarray(output, dtype=np.float64)
    scale = float(np.max(np.abs(reference))) or 1.0
    if not np.all(np.isfinite(output)):
        return float("inf")
    return float(np.max(np.abs(output - reference))) / scale


def against_reference(output: np.ndarray, reference: np.ndarray, precision: Precision) -> Check:
    """Compare a kernel's output with its float64 NumPy reference."""
    if output.shape != reference.shape:
        return Check(False, "shape", float("inf"), 0.0,
                     f"output shape {output.shape} != reference {reference.shape}")
    error = normwise_relative_error(output, reference)
    tolerance = KERNEL_TOLERANCE[precision]
    return Check(error <= tolerance, "max_rel_err", error, tolerance)
