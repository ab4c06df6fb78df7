"""The closed sets of names from design.md: frameworks, device kinds, strategies, precisions.

They are `str` enums so they serialise to JSON and TOML as their plain names, while code
compares members rather than loose strings.
"""
from __future__ import annotations

from enum import Enum


class _Named(str, Enum):
    def __str__(self) -> str:  # "torch", not "Framework.TORCH"
        return self.value

    @classmethod
    def names(cls) -> list[str]:
        return [member.value for member in cls]


class Framework(_Named):
    TORCH = "torch"
    TF = "tf"


class DeviceKind(_Named):
    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"


class Strategy(_Named):
    SINGLE = "single"
    TOWERS = "towers"
    MIRRORED = "mirrored"
    MULTIWORKER = "multiworker"
    TPU = "tpu"
    DATAPARALLEL = "dataparallel"
    DDP = "ddp"


class Precision(_Named):
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"


class Status(_Named):
    OK = "ok"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"


#: Which framework each strategy belongs to (``single`` belongs to both).
STRATEGY_FRAMEWORKS: dict[Strategy, frozenset[Framework]] = {
    Strategy.SINGLE: frozenset(Framework),
    Strategy.TOWERS: frozenset({Framework.TF}),
    Strategy.MIRRORED: frozenset({Framework.TF}),
    Strategy.MULTIWORKER: frozenset({Framework.TF}),
    Strategy.TPU: frozenset({Framework.TF}),
    Strategy.DATAPARALLEL: frozenset({Framework.TORCH}),
    Strategy.DDP: frozenset({Framework.TORCH}),
}
