"""Numerics checks: did a case compute the right thing? Stored beside every timing."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from suites.cases.vocabulary import Precision

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
        verdict, relation = ("pass", "<=") if self.passed else ("FAIL", ">")
        return f"{verdict} ({self.metric}={self.value:.2e} {relation} {self.tolerance:.0e})"


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


# --- training checks: parallel strategies and mixed precision --------------------------------
# A data-parallel strategy must produce the single-device full-batch gradient; mixed precision
# must follow the fp32 loss trajectory. Shared by the torch and TF training implementations.

#: Relative L2 error of first-step gradients against the float64 full-batch gradient, worst
#: parameter. A strategy bug (a missing shard, a sum instead of a mean) is an O(1) error.
#: fp32 measures ~1e-7 (mlp) to ~1e-4 (cnn, batch 256). tf32 rounds every matmul/conv input
#: to 10 mantissa bits (2^-11); these ReLU networks amplify that: simulating the rounding moves
#: the mlp's first-layer gradient by ~3% (a 5e-4 weight perturbation in float64 moves it ~2%).
GRADIENT_TOLERANCE: dict[Precision, float] = {Precision.FP32: 1e-3, Precision.TF32: 1e-1}
#: Max relative deviation of the mixed-precision loss from the fp32 loss over the first steps.
LOSS_TRAJECTORY_TOLERANCE: dict[Precision, float] = {Precision.FP16: 1e-2, Precision.BF16: 3e-2}
LOSS_TRAJECTORY_STEPS = 5
#: A parameter's gradient error is relative to its own reference gradient, or to this share of
#: the whole gradient's norm where its own is smaller: some parameters have an exactly zero true
#: gradient (an attention key bias: softmax ignores a constant added to every score of a row), so
#: their float32 rounding (~1e-8) over a float64 ~1e-17 would read as a huge relative error. A
#: strategy bug moves a whole shard's gradient, O(1) of the whole norm, far above this floor.
ZERO_GRADIENT_FLOOR = 1e-3


def relative_l2_error(output: np.ndarray, reference: np.ndarray, floor: float = 0.0) -> float:
    """||output - reference|| / max(||reference||, floor): unlike a max-norm it is not dominated
    by the few elements a flipped ReLU changes."""
    output = np.asarray(output, dtype=np.float64)
    if not np.all(np.isfinite(output)):
        return float("inf")
    return float(np.linalg.norm(output - reference)) / (max(float(np.linalg.norm(reference)), floor) or 1.0)


def gradients_against_reference(gradients: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                                 precision: Precision, detail: str = "") -> Check:
    """The worst parameter's `relative_l2_error`, floored at `ZERO_GRADIENT_FLOOR` x the whole
    reference gradient's norm."""
    floor = ZERO_GRADIENT_FLOOR * float(np.sqrt(sum(np.sum(np.square(g)) for g in reference.values())))
    errors = {name: relative_l2_error(gradients[name], reference[name], floor) for name in reference}
    worst = max(errors, key=errors.__getitem__)
    tolerance = GRADIENT_TOLERANCE[precision]
    return Check(errors[worst] <= tolerance, "grad_rel_l2_err", errors[worst], tolerance,
                 f"worst parameter {worst}" + (f"; {detail}" if detail else ""))


def loss_trajectory_check(losses: list[float], reference: list[float], precision: Precision,
                          detail: str = "") -> Check:
    """Max over steps of |loss - fp32 loss| / |fp32 loss|, same weights and batches."""
    deviation = max((abs(a - b) / abs(b) if np.isfinite(a) else float("inf"))
                    for a, b in zip(losses, reference))
    tolerance = LOSS_TRAJECTORY_TOLERANCE[precision]
    trajectory = ", ".join(f"{a:.4f}/{b:.4f}" for a, b in zip(losses, reference))
    return Check(deviation <= tolerance, "loss_traj_max_rel_err", deviation, tolerance,
                 f"{len(losses)} steps, loss {precision}/fp32: {trajectory}"
                 + (f"; {detail}" if detail else ""))
