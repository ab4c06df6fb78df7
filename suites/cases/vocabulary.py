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

#: Which device kinds each strategy can use at all: a pair outside this is no case anywhere
#: (TPUStrategy on a GPU; mirrored over TPU cores, which is strategy ``tpu``). A pair inside it
#: may still be unavailable on a given machine, with the reason. ``dataparallel`` keeps ``cpu``:
#: nn.DataParallel accepts a CPU module and runs it unchanged, which is worth a reason.
STRATEGY_DEVICES: dict[Strategy, frozenset[DeviceKind]] = {
    Strategy.SINGLE: frozenset(DeviceKind),
    Strategy.TOWERS: frozenset({DeviceKind.CPU, DeviceKind.GPU}),
    Strategy.MIRRORED: frozenset({DeviceKind.CPU, DeviceKind.GPU}),
    Strategy.MULTIWORKER: frozenset({DeviceKind.CPU, DeviceKind.GPU}),
    Strategy.TPU: frozenset({DeviceKind.TPU}),
    Strategy.DATAPARALLEL: frozenset({DeviceKind.CPU, DeviceKind.GPU}),
    Strategy.DDP: frozenset({DeviceKind.CPU, DeviceKind.GPU}),
}


def is_combination(framework: Framework, device: DeviceKind, strategy: Strategy) -> bool:
    """Whether a case of this framework, device kind and strategy exists at all; whether it
    runs on this machine is `suites.run.availability`'s question."""
    return framework in STRATEGY_FRAMEWORKS[strategy] and device in STRATEGY_DEVICES[strategy]
