"""TensorFlow implementations of the kernel workloads."""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from suites.frameworks.tf import backend  # first: TF's environment before TF loads
import tensorflow as tf

from suites.cases.vocabulary import Compile
from suites.frameworks.tf.distribute import configure_runtime
from suites.kept.check import Check, against_reference
from suites.kept.devices import last_level_cache_bytes
from suites.run.runnable import Runnable
from suites.workloads.kernels import CHECK_IMAGES, CHECK_ROWS, Conv2d, Matmul, rotation_count


class _TfKernel(Runnable):
    seed = 0
    unsupported_errors = backend.UNSUPPORTED_ERRORS

    def _prepare(self) -> None:
        configure_runtime(self.case)
        self.details.update(backend.cudnn_details(self.case))
        self.device = backend.device_name(self.case)
        self.dtype = backend.DTYPES[self.case.precision]
        backend.set_matmul_precision(self.case.precision)
        self.rng = np.random.default_rng(self.seed)
        self.copies = rotation_count(self.workload.input_elements() * self.dtype.size,
                                     last_level_cache_bytes(self.case.framework, self.case.device))
        self._order = itertools.cycle(range(self.copies))

    def synchronize(self) -> None:
        backend.synchronize()

    def _function(self, fn: Callable[..., tf.Tensor]) -> None:
        """The kernel as a `tf.function`, XLA-compiled in an `xla` case; `compile_anew` makes
        it anew, so the first timed step traces (and compiles) again after the check's."""
        self._kernel = fn
        self.compile_anew()

    def compile_anew(self) -> None:
        self.fn = tf.function(self._kernel, jit_compile=True if self.case.compile is Compile.XLA else None)

    def compilations(self) -> int | None:
        return self.fn.experimental_get_tracing_count() if self.case.compile is Compile.XLA else None


class TfMatmul(_TfKernel):
    workload: Matmul

    def setup(self) -> None:
        self._prepare()
        m, n, k = (int(self.p[x]) for x in "mnk")
        draw = lambda shape: backend.to_device(  # noqa: E731
            self.rng.standard_normal(shape, dtype=np.float32), self.device, self.dtype)
        self.a = [draw((m, k)) for _ in range(self.copies)]
        self.b = [draw((k, n)) for _ in range(self.copies)]
        self._function(tf.linalg.matmul)

    def step(self) -> None:
        i = next(self._order)
        with tf.device(self.device):
            self.fn(self.a[i], self.b[i])

    def check(self) -> Check:
        with tf.device(self.device):
            out = self.fn(self.a[0], self.b[0])[:CHECK_ROWS]
            rows = self.a[0][:CHECK_ROWS]
        reference = Matmul.reference(backend.to_numpy(rows), backend.to_numpy(self.b[0]))
        return against_reference(backend.to_numpy(out), reference, self.case.precision)


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
