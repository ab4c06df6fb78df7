"""TensorFlow implementations of the kernel workloads."""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from suites.frameworks.tf import backend  # first: TF's environment before TF loads
import tensorflow as tf

from suites.cases.vocabulary import Compile
from suites.frameworks.tf.distribute import configure_runtime
from suites.records.check import Check, against_reference
from suites.hardware.devices import last_level_cache_bytes
from suites.measure.runnable import Runnable
from suites.measure.capabilities import SplitsKernels
from suites.workloads.kernels import CHECK_IMAGES, CHECK_ROWS, Conv2d, Matmul, rotation_count

#: Where a split matmul adds its partial products: the host CPU, as the classic examples do.
HOST_CPU = "/CPU:0"


class _TfKernel(Runnable):
    seed = 0
    unsupported_errors = backend.UNSUPPORTED_ERRORS

    def _prepare(self) -> None:
        configure_runtime(self.job)
        self.details.update(backend.cudnn_details(self.case))
        self.device = backend.device_name(self.case)
        self.dtype = backend.DTYPES[self.case.precision]
        backend.set_matmul_precision(self.case.precision)
        self.rng = np.random.default_rng(self.seed)
        hooks = self.job.strategy.hooks
        shares = hooks.kernel_cache_shares(self.job) if isinstance(hooks, SplitsKernels) else 1
        per_cache = self.workload.input_elements() * self.dtype.size // shares
        self.copies = rotation_count(per_cache, last_level_cache_bytes(self.case.framework, self.case.device))
        self._order = itertools.cycle(range(self.copies))

    def synchronize(self) -> None:
        backend.synchronize()

    def _function(self, fn: Callable[..., tf.Tensor]) -> None:
        """The kernel as a `tf.function`, XLA-compiled in an `xla` case; `compile_anew` makes
        it anew, so the first timed step traces (and compiles) again after the check's."""
        self._kernel = fn
        backend.quiet_expected_retracing()
        self.compile_anew()

    def compile_anew(self) -> None:
        self.fn = tf.function(self._kernel, jit_compile=True if self.case.compile is Compile.XLA else None)

    def compilations(self) -> int | None:
        return self.fn.experimental_get_tracing_count() if self.case.compile is Compile.XLA else None


class TfMatmul(_TfKernel):
    """A @ B on the case's device; or, where the strategy splits it (`towers`:
    `suites.measure.capabilities.SplitsKernels`), the classic multi-device matmul: K cut into one slice per
    device, each device computing A[:, slice] @ B[slice, :], the partial products added on the
    host CPU with `tf.add_n`."""

    workload: Matmul

    def setup(self) -> None:
        self._prepare()
        m, n, k = (int(self.p[x]) for x in "mnk")
        hooks = self.job.strategy.hooks
        devices = (hooks.kernel_devices(self.job) if isinstance(hooks, SplitsKernels) else None) or [self.device]
        #: One (A, B) pair of parts per device, for each rotated copy.
        def draw(shape: tuple[int, int], axis: int) -> tuple[tf.Tensor, ...]:
            parts = np.split(self.rng.standard_normal(shape, dtype=np.float32), len(devices), axis=axis)
            return tuple(backend.to_device(part, device, self.dtype) for part, device in zip(parts, devices))

        self.a = [draw((m, k), axis=1) for _ in range(self.copies)]
        self.b = [draw((k, n), axis=0) for _ in range(self.copies)]
        if len(devices) == 1:
            self._function(lambda a, b: tf.linalg.matmul(a[0], b[0]))
        else:
            self.details["split"] = (f"k = {k} split over {', '.join(devices)}; partial products "
                                     f"added on {HOST_CPU} (tf.add_n)")
            self._function(split_matmul(devices, HOST_CPU))

    def step(self) -> None:
        i = next(self._order)
        with tf.device(self.device):
            self.fn(self.a[i], self.b[i])

    def check(self) -> Check:
        with tf.device(self.device):
            out = self.fn(self.a[0], self.b[0])[:CHECK_ROWS]
        rows = np.concatenate([backend.to_numpy(part[:CHECK_ROWS]) for part in self.a[0]], axis=1)
        columns = np.concatenate([backend.to_numpy(part) for part in self.b[0]], axis=0)
        return against_reference(backend.to_numpy(out), Matmul.reference(rows, columns), self.case.precision)


def split_matmul(devices: list[str], host: str) -> Callable[[tuple[tf.Tensor, ...], tuple[tf.Tensor, ...]], tf.Tensor]:
    """sum_i A_i @ B_i: part i's product on `devices[i]`, the sum on `host`."""
    def matmul(a_parts: tuple[tf.Tensor, ...], b_parts: tuple[tf.Tensor, ...]) -> tf.Tensor:
        partials = []
        for device, a, b in zip(devices, a_parts, b_parts):
            with tf.device(device):
                partials.append(tf.linalg.matmul(a, b))
        with tf.device(host):
            return tf.add_n(partials)
    return matmul


class TfConv2d(_TfKernel):
    workload: Conv2d

    def setup(self) -> None:
        self._prepare()
        p = self.p
        self.nchw = p["layout"] == "nchw"
        images = [self.rng.standard_normal((p["batch"], p["h"], p["w"], p["cin"]), dtype=np.float32)
                  for _ in range(self.copies)]
        self.x = [backend.to_device(image.transpose(0, 3, 1, 2) if self.nchw else image,
                                    self.device, self.dtype) for image in images]
        self.filters = backend.to_device(self.rng.standard_normal(
            (p["kernel"], p["kernel"], p["cin"], p["cout"]), dtype=np.float32), self.device, self.dtype)
        stride, padding = int(p["stride"]), str(p["padding"]).upper()
        data_format = "NCHW" if self.nchw else "NHWC"
        self._function(lambda x, f: tf.nn.conv2d(x, f, strides=stride, padding=padding,
                                                 data_format=data_format))

    def step(self) -> None:
        with tf.device(self.device):
            self.fn(self.x[next(self._order)], self.filters)

    def check(self) -> Check:
        with tf.device(self.device):
            images = self.x[0][:CHECK_IMAGES]
            out = self.fn(images, self.filters)
        images, out = backend.to_numpy(images), backend.to_numpy(out)
        if self.nchw:
            images, out = images.transpose(0, 2, 3, 1), out.transpose(0, 2, 3, 1)
        reference = self.workload.reference(images, backend.to_numpy(self.filters))
        return against_reference(out, reference, self.case.precision)
