"""TensorFlow specifics shared by every TF implementation: devices, dtypes, sync, precision flags.

Importing it sets TensorFlow's environment (`suites.frameworks.tf.environment`) before TF loads, and
keeps TF's start-up lines out of the output (`environment.quiet_import`):
every module of this package that uses TensorFlow imports this one first.
"""
from __future__ import annotations

import logging
import os
from typing import Any

from suites.frameworks.tf import environment

environment.apply_defaults()  # before TF loads: TF reads these once

import numpy as np  # noqa: E402

with environment.quiet_import():  # TF's start-up lines, which TF_CPP_MIN_LOG_LEVEL no longer stops
    import tensorflow as tf  # noqa: E402

from suites.cases.case import Case  # noqa: E402
from suites.cases.vocabulary import DeviceKind, Precision  # noqa: E402

DTYPES = {Precision.FP32: tf.float32, Precision.TF32: tf.float32,
          Precision.FP16: tf.float16, Precision.BF16: tf.bfloat16}


def device_name(case: Case, index: int = 0) -> str:
    return {DeviceKind.CPU: "/CPU:0", DeviceKind.GPU: f"/GPU:{index}",
            DeviceKind.TPU: f"/TPU:{index}"}[case.device]


def synchronize() -> None:
    """Wait for every device's queued work (TF GPU ops and async eager return early)."""
    tf.test.experimental.sync_devices()


def set_matmul_precision(precision: Precision) -> None:
    """TF enables TF32 by default on Ampere+: fp32 must turn it off to be real fp32."""
    tf.config.experimental.enable_tensor_float_32_execution(precision is Precision.TF32)


def to_device(array: np.ndarray, device: str, dtype: tf.DType) -> tf.Tensor:
    with tf.device(device):
        return tf.identity(tf.cast(tf.constant(array), dtype))


def to_numpy(tensor: tf.Tensor) -> np.ndarray:
    """float64 on the host; cast there, so a check touches no other device (TPUs have no float64)."""
    with tf.device("/CPU:0"):
        return tf.cast(tensor, tf.float64).numpy()


def cudnn_details(case: Case) -> dict[str, Any]:
    """What a GPU case's record says about cuDNN autotuning, which TF does unless
    TF_CUDNN_USE_AUTOTUNE turns it off (torch's cases turn theirs on to match)."""
    if case.device is not DeviceKind.GPU:
        return {}
    setting = os.environ.get("TF_CUDNN_USE_AUTOTUNE", "true").strip().lower()
    return {"cudnn_autotune": setting not in ("0", "false")}

#: Errors meaning "TF has no kernel for this here" (e.g. NCHW Conv2D in fp16 on CPU).
UNSUPPORTED_ERRORS: tuple[type[Exception], ...] = (tf.errors.UnimplementedError,)


#: Functions parbench traces anew on purpose: each kernel case's own function (traced by its check,
#: then again, cold, in its first step, whose time is stored apart) and every trainer's checked
#: step (the case's and its check's reference trainers, each with variables of its own).
TRACED_ANEW = ("checked_step", "TfMatmul.setup.", "TfConv2d.setup.", "split_matmul.")


class _ExpectedRetracing(logging.Filter):
    """Drops TF's warning that a function of `TRACED_ANEW` "triggered tf.function retracing".

    TF counts traces per Python function across `tf.function` objects, so over a few cases these
    read as "5 out of the last 13 calls to ... triggered tf.function retracing". No timed step
    retraces (tests/test_tf_tracing.py); a warning about any other function stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and any(name in message for name in TRACED_ANEW))


def quiet_expected_retracing() -> None:
    """Put `_ExpectedRetracing` on TF's logger (once)."""
    logger = logging.getLogger("tensorflow")
    if not any(isinstance(existing, _ExpectedRetracing) for existing in logger.filters):
        logger.addFilter(_ExpectedRetracing())
