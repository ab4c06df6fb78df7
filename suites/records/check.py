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
    #: Whether the value is within the tolerance (never, where the check did not run).
    passed: bool
    #: What was compared ("max_rel_err", "shape", ...); NOT_CHECKED where the check did not run.
    metric: str
    #: The metric's value (not checked: what running the check would have needed).
    value: float
    #: The most the value may be (not checked: the limit that is over).
    tolerance: float
    #: More on the comparison; not checked: why, and how to check the case instead.
    detail: str = ""
    #: Wall time of the whole check (its steps and its reference), seconds; None: not measured
    #: (and in records older than the field).
    check_s: float | None = None
    #: The most memory the check held beyond what the process (CPU: resident set) or its
    #: busiest GPU (allocator) held when the check began, bytes; None: not measured (and in
    #: records older than the field).
    memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Check":
        return cls(**data)

    @property
    def checked(self) -> bool:
        """Whether the check ran (`not_checked`: it did not, and it did not pass)."""
        return self.metric != NOT_CHECKED

    def __str__(self) -> str:
        if not self.checked:
            return f"not checked ({self.detail})"
        verdict, relation = ("pass", "<=") if self.passed else ("FAIL", ">")
        return f"{verdict} ({self.metric}={self.value:.2e} {relation} {self.tolerance:.0e})"


#: The metric of a check that did not run: it never passes (a check left undone shows nothing
#: correct); its value is what running it would have needed (e.g. its reference's FLOP) and its
#: tolerance the limit that is over, both named in its detail.
NOT_CHECKED = "not_checked"


def not_checked(value: float, limit: float, detail: str) -> Check:
    """A check left undone because what it needs, `value`, is over `limit`; `detail` says what
    they are and how to check the case instead."""
    return Check(False, NOT_CHECKED, float(value), float(limit), detail)


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

#: A parameter's gradient error is measured against its own reference gradient's norm plus this
#: share of the whole reference gradient's norm (torch.testing's atol + rtol x |expected|, per
#: parameter, with atol scaled to the whole gradient). Relative to its own norm alone the error is
#: ill-conditioned: a deep batch-norm scale of ResNet-50 whose true gradient is ~1e-2 of the whole
#: read 1.6e-2 in fp32 (TF, batch 2; the issue #22 report), and an attention key bias, whose true gradient is exactly
#: zero, reads its float32 rounding over ~1e-17. A strategy bug (a missing or doubled shard, a
#: gradient not averaged) moves whole parameters by O(1) of their own norm.
GRADIENT_FLOOR = 1e-2
#: Tolerance of `gradient_error` per precision. Measured float32 vs float64 first-step gradients
#: (CPU, same weights and batch; `floored`: `gradient_error` of the worst parameter, `whole`: the
#: whole gradient's relative L2 error); the tolerance sits 4x above the worst:
#:   ResNet-50 (224x224, 1000 classes), torch, batch 2: floored 3.0e-6, whole 6.2e-7; batch 8:
#:     floored 1.2e-3, whole 3.0e-4 (a ReLU or max-pool choice that flips between float32 and
#:     float64 reroutes whole gradients). TF, batch 2: floored 1.2e-2 (stem.conv.kernel), whole
#:     2.9e-3; batch 8: floored 2.7e-3. TF's float64 gradient equals torch's to 3e-15, so this is
#:     TF's float32 CPU kernels (oneDNN on or off alike), confined to the stem (conv, batch norm).
#:   BERT-base and GPT-2 small (2 layers, seq 128), batch 4: floored 2.9e-6 / 3.0e-6, whole 5e-7;
#:   the Llama stack (2 layers, d_model 512, seq 128), batch 4: floored 2.2e-6, whole 1.3e-6;
#:   the mlp and cnn, batch 8: floored 3.0e-7 / 2.0e-5.
#: A strategy bug measures 0.25 or more (tests/test_check_faults.py). tf32 rounds every
#: matmul/conv input to 10 mantissa bits (2^-11); these ReLU networks amplify that: simulating the
#: rounding moves the mlp's first-layer gradient by ~3%.
GRADIENT_TOLERANCE: dict[Precision, float] = {Precision.FP32: 5e-2, Precision.TF32: 1e-1}
#: Max relative deviation of the mixed-precision loss from the fp32 loss over the first steps.
#: Measured bf16 on the CPU (SGD, the check batch of 2, 5 steps; torch / TF): ResNet-50 (224x224)
#: 5.0e-4 / 5.1e-4; BERT-base and GPT-2 small (2 layers, seq 128) 9.3e-3 / 4.1e-3 and 5.5e-3 /
#: 1.2e-2 (their loss swings from 2.4 to 19 within the 5 steps); the Llama stack (2 layers,
#: d_model 512) 1.8e-3 / 1.5e-3. fp16 (not measured here: CPU fp16 kernels are too slow) keeps
#: a third of bf16's tolerance, for its 10 mantissa bits to bf16's 7.
LOSS_TRAJECTORY_TOLERANCE: dict[Precision, float] = {Precision.FP16: 1e-2, Precision.BF16: 3e-2}
LOSS_TRAJECTORY_STEPS = 5


def gradient_norm(gradients: dict[str, np.ndarray]) -> float:
    """The L2 norm of all the parameters' gradients together."""
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(g, np.float64))) for g in gradients.values())))


def difference_norm(output: np.ndarray, reference: np.ndarray) -> float:
    """||output - reference|| in float64; infinite where the output is not finite."""
    output = np.asarray(output, dtype=np.float64)
    if not np.all(np.isfinite(output)):
        return float("inf")
    return float(np.linalg.norm(output - reference))


def gradients_against_reference(gradients: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                                precision: Precision, detail: str = "") -> Check:
    """The worst parameter's error, ||output - reference|| / (||reference|| + GRADIENT_FLOOR x
    the whole reference gradient's norm); the detail names it and gives the whole gradient's
    relative L2 error beside it."""
    tolerance = GRADIENT_TOLERANCE[precision]
    suffix = f"; {detail}" if detail else ""
    missing = sorted(set(reference) - set(gradients))
    if missing:
        return Check(False, "grad_rel_l2_err", float("inf"), tolerance,
                     f"no gradient for {', '.join(missing[:5])}{suffix}")
    whole = gradient_norm(reference) or 1.0
    differences = {name: difference_norm(gradients[name], reference[name]) for name in reference}
    errors = {name: differences[name] / (float(np.linalg.norm(reference[name])) + GRADIENT_FLOOR * whole)
              for name in reference}
    worst = max(errors, key=errors.__getitem__)
    whole_error = float(np.sqrt(sum(d * d for d in differences.values()))) / whole
    return Check(errors[worst] <= tolerance, "grad_rel_l2_err", errors[worst], tolerance,
                 f"worst parameter {worst}; whole gradient {whole_error:.1e}{suffix}")


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
