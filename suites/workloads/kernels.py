"""Kernel workloads: one op, timed alone. Framework-neutral definitions."""
from __future__ import annotations

import math
import os
from typing import ClassVar, Mapping

import numpy as np

from suites.cases.case import ParamValue
from suites.cases.vocabulary import Framework
from suites.workloads.base import Param, Workload

#: Inputs are rotated through enough copies to span this many bytes, so a kernel whose
#: operands fit in cache is not timed hot from the previous step. PARBENCH_ROTATION_BYTES
#: overrides it (0: one copy, hot-cache timing as torch.utils.benchmark does).
ROTATION_BYTES = 64 * 2**20
ROTATION_ENV = "PARBENCH_ROTATION_BYTES"
MAX_ROTATION = 16
#: The numerics check compares at most this many leading rows / images with float64.
CHECK_ROWS = 128
CHECK_IMAGES = 2


def rotation_count(bytes_per_input_set: int) -> int:
    span = int(os.environ.get(ROTATION_ENV, ROTATION_BYTES))
    return max(1, min(MAX_ROTATION, math.ceil(span / max(bytes_per_input_set, 1))))


class Matmul(Workload):
    """C[M,N] = A[M,K] @ B[K,N]."""

    name = "matmul"
    kind = "kernel"
    params = (Param("m", help="rows of A and C"), Param("n", help="columns of B and C"),
              Param("k", help="inner dimension"))
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "suites.frameworks.torch.kernels:TorchMatmul",
        Framework.TF: "suites.frameworks.tf.kernels:TfMatmul",
    }

    def flops_per_step(self) -> float:
        return 2.0 * self.p["m"] * self.p["n"] * self.p["k"]  # type: ignore[operator]

    def input_elements(self) -> int:
        m, n, k = (int(self.p[x]) for x in "mnk")
        return m * k + k * n

    @staticmethod
    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a.astype(np.float64) @ b.astype(np.float64)


def conv_output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    if padding == "same":
        return math.ceil(size / stride)
    return (size - kernel) // stride + 1


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """(before, after) padding of TensorFlow's 'same': any odd extra goes after."""
    total = max((conv_output_size(size, kernel, stride, "same") - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class Conv2d(Workload):
    """2-D convolution, square kernel, no bias. Shapes are logical NHWC; `layout` is storage."""

    name = "conv2d"
    kind = "kernel"
    params = (
        Param("batch"), Param("h", help="input height"), Param("w", help="input width"),
        Param("cin", help="input channels"), Param("cout", help="output channels"),
        Param("kernel", default=3), Param("stride", default=1),
        Param("padding", type=str, default="same", choices=("same", "valid"), minimum=None),
        Param("layout", type=str, default="nhwc", choices=("nhwc", "nchw"), minimum=None),
    )
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "suites.frameworks.torch.kernels:TorchConv2d",
        Framework.TF: "suites.frameworks.tf.kernels:TfConv2d",
    }

    @classmethod
    def shape_problems(cls, params: Mapping[str, ParamValue]) -> list[str]:
        p = {**cls.defaults(), **params}
        if p["padding"] == "valid" and (p["kernel"] > p["h"] or p["kernel"] > p["w"]):  # type: ignore[operator]
            return [f"kernel {p['kernel']} is larger than the {p['h']}x{p['w']} image with padding 'valid'"]
        return []

    @property
    def output_hw(self) -> tuple[int, int]:
        k, s, pad = int(self.p["kernel"]), int(self.p["stride"]), str(self.p["padding"])
        return (conv_output_size(int(self.p["h"]), k, s, pad),
                conv_output_size(int(self.p["w"]), k, s, pad))

    def flops_per_step(self) -> float:
        h_out, w_out = self.output_hw
        p = self.p
        return 2.0 * p["batch"] * h_out * w_out * p["cout"] * p["kernel"] ** 2 * p["cin"]  # type: ignore[operator]

    def samples_per_step(self) -> int:
        return int(self.p["batch"])

    def input_elements(self) -> int:
        p = self.p
        return int(p["batch"] * p["h"] * p["w"] * p["cin"] + p["kernel"] ** 2 * p["cin"] * p["cout"])  # type: ignore[operator]

    def padded(self, images_nhwc: np.ndarray) -> np.ndarray:
        """Pad NHWC images for 'same' the TensorFlow way, so every framework computes one function."""
        if self.p["padding"] != "same":
            return images_nhwc
        k, s = int(self.p["kernel"]), int(self.p["stride"])
        pad_h = same_padding(images_nhwc.shape[1], k, s)
        pad_w = same_padding(images_nhwc.shape[2], k, s)
        return np.pad(images_nhwc, ((0, 0), pad_h, pad_w, (0, 0)))

    def reference(self, images_nhwc: np.ndarray, filters_hwio: np.ndarray,
                  already_padded: bool = False) -> np.ndarray:
        """float64 NHWC output of the convolution (cross-correlation, as both frameworks do)."""
        x = images_nhwc.astype(np.float64)
        if not already_padded:
            x = self.padded(x)
        k, s = int(self.p["kernel"]), int(self.p["stride"])
        windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))[:, ::s, ::s]
        # windows: N, Hout, Wout, Cin, kh, kw
        return np.einsum("nhwcij,ijco->nhwo", windows, filters_hwio.astype(np.float64), optimize=True)
