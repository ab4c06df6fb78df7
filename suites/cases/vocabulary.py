"""The names of parbench's axes: frameworks, device kinds, strategies, precisions, compilers, statuses.

They are `str` enums so they serialise to JSON and TOML as their plain names, while code
compares members rather than loose strings. What a strategy means for a framework (where it
applies, on which devices) lives in its plugin (`suites.strategies.<framework>.<strategy>`),
found through `suites.strategies.registry`; a framework's facts live in its subpackage.
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
    FSDP = "fsdp"
    TENSOR = "tensor"
    FSDP_TENSOR = "fsdp_tensor"
    PIPELINE = "pipeline"
    MODEL_PARALLEL = "model_parallel"
    PARAMETER_SERVER = "parameter_server"
    HOROVOD = "horovod"


class Precision(_Named):
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"


class Compile(_Named):
    """How a case's step is compiled: `none` runs it as the framework does by default (torch
    eager, TF `tf.function` graphs), `xla` under TF's `tf.function(jit_compile=True)`,
    `inductor` under `torch.compile`. Which framework has which compiler, and which strategies
    run under it, is the strategy plugins' knowledge (`Rules.compilers` of `StrategyPlugin.rules`)."""

    NONE = "none"
    XLA = "xla"
    INDUCTOR = "inductor"


class Status(_Named):
    OK = "ok"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"
