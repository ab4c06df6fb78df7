"""Kernel workloads: one op, timed alone. Framework-neutral definitions."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from suites import knobs
from suites.cases.case import ParamValue
from suites.workloads.base import Param, Workload
from suites.workloads.collectives import DTYPE_BYTES

#: A kernel's inputs are rotated through copies that together span more than the device's
#: last-level cache (CACHE_MULTIPLE x its size: the CPU's L3, a GPU's L2 — 50 MB on an H100 — or
#: an AMD GPU's Infinity Cache, 256 MiB on an MI300X: suites.hardware.devices.last_level_cache_bytes),
#: so a kernel whose operands would fit in it is not timed hot from the previous step. The span
#: is at least ROTATION_BYTES, which is also the span where the cache size is unknown.
#: PARBENCH_ROTATION_BYTES sets the span instead (0: one copy, hot-cache timing as
#: torch.utils.benchmark does).
ROTATION_BYTES = 64 * 2**20
CACHE_MULTIPLE = 2
ROTATION_ENV = "PARBENCH_ROTATION_BYTES"
#: Copies are capped at span / MIN_ROTATED_SET_BYTES: a kernel on inputs smaller than this is
#: bound by launch and call overhead, not by where its operands sit, and thousands of tiny
#: copies would only slow its setup. (Every built-in kernel's inputs are over 1 MiB.)
MIN_ROTATED_SET_BYTES = 64 * 2**10
#: A training step's batches rotate through at most this many (spanning at most the same
#: span): the step re-reads its weights and activations anyway, and more batches would only
#: slow each case's setup (by up to a second for TF's multi-replica batches).
BATCH_ROTATION = 16
#: The numerics check compares at most this many leading rows / images with float64.
CHECK_ROWS = 128
CHECK_IMAGES = 2


def rotation_span_bytes(cache_bytes: int | None) -> int:
    """The bytes a kernel's input copies span on a device whose last-level cache holds
    `cache_bytes` (None: unknown)."""
    override = knobs.read(ROTATION_ENV)
    if override is not None:
        return override
    return max(ROTATION_BYTES, CACHE_MULTIPLE * (cache_bytes or 0))


def rotation_count(bytes_per_input_set: int, cache_bytes: int | None) -> int:
    """How many copies of one set of a kernel's inputs to rotate through: enough to span
    `rotation_span_bytes(cache_bytes)`, at most span / MIN_ROTATED_SET_BYTES."""
    span = rotation_span_bytes(cache_bytes)
    cap = max(1, span // MIN_ROTATED_SET_BYTES)
    return max(1, min(cap, math.ceil(span / max(bytes_per_input_set, 1))))


def batch_rotation_count(bytes_per_batch: int) -> int:
    """How many random batches a training step rotates through (see BATCH_ROTATION)."""
    span = rotation_span_bytes(None)
    return max(1, min(BATCH_ROTATION, math.ceil(span / max(bytes_per_batch, 1))))


class Matmul(Workload):
    """C[M,N] = A[M,K] @ B[K,N]."""

    name = "matmul"
    kind = "kernel"
    params = (Param("m", help="rows of A and C"), Param("n", help="columns of B and C"),
              Param("k", help="inner dimension"))
    rehearsal_params = {"m": 64, "n": 64, "k": 64}

    def flops_per_step(self) -> float:
        return 2.0 * self.p["m"] * self.p["n"] * self.p["k"]  # type: ignore[operator]

    def input_elements(self) -> int:
        m, n, k = (int(self.p[x]) for x in "mnk")
        return m * k + k * n

    def split_problem(self, parts: int, what: str) -> str | None:
        """A matmul split over devices (`towers`) is split along K."""
        if int(self.p["k"]) % parts:
            return f"k = {self.p['k']} does not split evenly over {parts} {what}"
        return None

    def min_bytes_per_step(self) -> int:
        """A and B read, C written: (MK + KN + MN) elements."""
        m, n = int(self.p["m"]), int(self.p["n"])
        return (self.input_elements() + m * n) * DTYPE_BYTES[self.case.precision]

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
    rehearsal_params = {"batch": 2, "h": 16, "w": 16, "cin": 16, "cout": 16}

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

    def min_bytes_per_step(self) -> int:
        """Images and filters read, output written: (N·H·W·Cin + K²·Cin·Cout + N·Hout·Wout·Cout) elements."""
        h_out, w_out = self.output_hw
        output = int(self.p["batch"]) * h_out * w_out * int(self.p["cout"])
        return (self.input_elements() + output) * DTYPE_BYTES[self.case.precision]

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
