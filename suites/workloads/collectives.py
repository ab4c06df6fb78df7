"""Collective workloads, framework-neutral, in the style of nccl-tests."""
from __future__ import annotations


import numpy as np

from suites.cases.vocabulary import Precision
from suites.workloads.base import Param, Workload

#: Buffers of the check hold (participant + index) mod PATTERN_PERIOD: small integers, so every
#: partial sum is exact in fp16/bf16 up to 2**8 / (PATTERN_PERIOD - 1) = 128 participants.
PATTERN_PERIOD = 3
#: Seed of the random (timed) buffers, offset by the participant's rank.
DATA_SEED = 1


def check_pattern(participant: int, elements: int) -> np.ndarray:
    return ((participant + np.arange(elements)) % PATTERN_PERIOD).astype(np.float64)


def expected_sum(participants: int, elements: int) -> np.ndarray:
    """What every participant must hold after all-reducing the check pattern."""
    return sum(check_pattern(p, elements) for p in range(participants))


DTYPE_BYTES = {Precision.FP32: 4, Precision.TF32: 4, Precision.FP16: 2, Precision.BF16: 2}


class Allreduce(Workload):
    """Sum-all-reduce of a `bytes`-sized buffer across `n_devices` participants.

    Metrics (nccl-tests): algbw = bytes / t; busbw = algbw * 2(n-1)/n. The check: every
    participant fills its buffer with a rank-dependent pattern and the reduced buffer must
    equal the analytic sum. `backend` picks torch's process-group backend (gloo, nccl) or
    TF's collective implementation (ring, nccl, auto)."""

    name = "allreduce"
    kind = "collective"
    params = (
        Param("bytes", help="message size in bytes (per participant)"),
        Param("backend", type=str, default="auto", choices=("auto", "gloo", "nccl", "ring"), minimum=None),
    )
    precisions = frozenset({Precision.FP32, Precision.FP16, Precision.BF16})
    rehearsal_params = {"bytes": 65536}

    @property
    def elements(self) -> int:
        return max(1, int(self.p["bytes"]) // DTYPE_BYTES[self.case.precision])

    def flops_per_step(self) -> float:
        return 0.0

    def bytes_per_step(self) -> int:
        return self.elements * DTYPE_BYTES[self.case.precision]
