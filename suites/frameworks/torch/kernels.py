"""PyTorch implementations of the kernel workloads."""
from __future__ import annotations

import itertools
from typing import Any, Callable, ContextManager

import numpy as np
import torch

from suites.cases.vocabulary import Compile
from suites.frameworks.torch import backend, compiling
from suites.frameworks.torch.profiling import ProfiledKernels
from suites.records.check import Check, against_reference
from suites.hardware.devices import last_level_cache_bytes
from suites.measure.runnable import Runnable
from suites.measure.capabilities import SplitsKernels
from suites.workloads.kernels import CHECK_IMAGES, CHECK_ROWS, Conv2d, Matmul, rotation_count


class _TorchKernel(ProfiledKernels, Runnable):
    seed = 0
    #: What holds device memory: released at teardown.
    device_state = ("a", "b", "out", "x", "weight")
    #: torch's settings before `setup` changed them; teardown puts them back.
    _saved_flags: backend.Flags | None = None
    #: An inductor case's compiler settings, put back at teardown.
    _cold: compiling.ColdCompiles | None = None
    #: A CUDA-graphs case (reduce-overhead) whose graphs, one per rotated input copy, are still
    #: to be recorded: the first step after a compile records them all (`_record_graphs`).
    _unrecorded = False

    def _prepare(self) -> None:
        if self.case.compile is Compile.INDUCTOR:
            self._cold = compiling.ColdCompiles()
        self.device = backend.device_for(self.case)
        self.dtype = backend.DTYPES[self.case.precision]
        self._saved_flags = backend.configure(self.case)
        self.details.update(backend.flag_details(self.case))
        self.rng = np.random.default_rng(self.seed)
        element_bytes = torch.finfo(self.dtype).bits // 8
        hooks = self.job.strategy.hooks
        shares = hooks.kernel_cache_shares(self.job) if isinstance(hooks, SplitsKernels) else 1
        per_cache = self.workload.input_elements() * element_bytes // shares
        self.copies = rotation_count(per_cache, last_level_cache_bytes(self.case.framework, self.case.device))
        self._order = itertools.cycle(range(self.copies))

    def synchronize(self) -> None:
        backend.synchronize(self.device)

    def compilations(self) -> int | None:
        return compiling.compilations() if self._cold else None

    def compile_anew(self) -> None:
        if self._cold:
            compiling.forget()
            self._unrecorded = compiling.replays_graphs(self.job)

    def _static_inputs(self, tensors: list[torch.Tensor]) -> None:
        """Under CUDA graphs (reduce-overhead): the kernel's inputs, every rotated copy, at static
        addresses (`compiling.static_inputs`), so that a replay runs the kernel alone. Otherwise
        each replay first copied its inputs into the graph's own input buffers, and a step timed
        those copies too, into a buffer that stays cache-hot whichever copy is rotated in."""
        if compiling.replays_graphs(self.job):
            compiling.static_inputs(tensors)
            self._unrecorded = True

    def _compute(self, i: int) -> Any:
        """The (compiled) kernel on rotated input copy `i`."""
        raise NotImplementedError

    def _record_graphs(self) -> None:
        """Record the CUDA graph of every rotated copy, in the first step after a compile (whose
        time holds the compilation, stored apart): each copy's static inputs get a graph of
        their own, recorded the second time the compiled function meets them (the first call
        warms up), so two rounds over the copies leave every later step a replay."""
        if not self._unrecorded:
            return
        for _ in range(2):
            for i in range(self.copies):
                self._compute(i)
        self._unrecorded = False

    def teardown(self) -> None:
        backend.release_device_memory(self, self.device_state, getattr(self, "device", None))
        if self._saved_flags is not None:
            self._saved_flags.restore()
        if self._cold is not None:
            compiling.forget()  # the next case starts with no graph of this one's
            self._cold.restore()


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


def _conv2d(x: torch.Tensor, weight: torch.Tensor, stride: int) -> torch.Tensor:
    # 'same' padding was applied to the stored inputs (TF's convention), so pad 0 here.
    return torch.nn.functional.conv2d(x, weight, stride=stride)


class TorchMatmul(_TorchKernel):
    """A @ B on the case's device; or, where the strategy splits it (`towers`' hooks:
    `suites.measure.capabilities.SplitsKernels`), the classic multi-GPU matmul (`SplitMatmul`).

    Under torch.compile's reduce-overhead (CUDA graphs) the rotated copies of A and B are static
    inputs (`torch._dynamo.mark_static_address`): each copy gets a graph recorded over it, and a
    step replays the GEMM on the copy in place. That choice, rather than one graph over one
    static buffer that every step copies its inputs into, is what keeps a replay the GEMM alone
    (no two input copies timed with it) and keeps the cold-cache rotation real (the GEMM reads
    the rotated copy, not a cache-hot buffer). The graphs are all recorded in the first step
    (`_record_graphs`)."""

    workload: Matmul
    device_state = (*_TorchKernel.device_state, "split")
    #: The split over several GPUs, where the strategy asks for one.
    split: "SplitMatmul | None" = None

    def setup(self) -> None:
        self._prepare()
        m, n, k = (int(self.p[x]) for x in "mnk")
        hooks = self.job.strategy.hooks
        devices = hooks.kernel_devices(self.job) if isinstance(hooks, SplitsKernels) else None
        if devices:
            self._setup_split(m, n, k, devices)
            return
        draw = lambda shape: backend.to_device(  # noqa: E731
            self.rng.standard_normal(shape, dtype=np.float32), self.device, self.dtype)
        self.a = [draw((m, k)) for _ in range(self.copies)]
        self.b = [draw((k, n)) for _ in range(self.copies)]
        self.out = torch.empty((m, n), device=self.device, dtype=self.dtype)
        self._compiled = compiling.compiled(self.job, _matmul) if self._cold else None
        self._static_inputs([*self.a, *self.b])

    def _compute(self, i: int) -> torch.Tensor:
        return self._product(i)

    def _product(self, i: int) -> torch.Tensor:
        """Eager: into the preallocated output (no allocation timed); compiled: inductor's
        graph, which allocates its output itself."""
        if self._compiled is not None:
            return self._compiled(self.a[i], self.b[i])
        return torch.mm(self.a[i], self.b[i], out=self.out)

    def _setup_split(self, m: int, n: int, k: int, devices: list[torch.device]) -> None:
        """A and B cut along K, part i on devices[i] (one list of parts per rotated copy)."""
        def draw(shape: tuple[int, int], axis: int) -> list[torch.Tensor]:
            parts = np.split(self.rng.standard_normal(shape, dtype=np.float32), len(devices), axis=axis)
            return [backend.to_device(part, device, self.dtype) for part, device in zip(parts, devices)]

        self.a = [draw((m, k), axis=1) for _ in range(self.copies)]
        self.b = [draw((k, n), axis=0) for _ in range(self.copies)]
        self.split = SplitMatmul(devices, (m, n), self.dtype)
        for device in devices:  # the inputs, copied on each device's default stream, are there
            backend.synchronize(device)
        self.details["split"] = (f"k = {k} split over {', '.join(map(str, devices))}, one CUDA stream "
                                 "each; partial products added on the host CPU")

    def step(self) -> None:
        self._record_graphs()
        i = next(self._order)
        if self.split is not None:
            self.split(self.a[i], self.b[i])
        else:
            self._product(i)

    def check(self) -> Check:
        rows = slice(0, CHECK_ROWS)
        if self.split is not None:
            out = self.split(self.a[0], self.b[0])
            a = np.concatenate([backend.to_numpy(part[rows]) for part in self.a[0]], axis=1)
            b = np.concatenate([backend.to_numpy(part) for part in self.b[0]], axis=0)
        else:
            out = self._product(0)
            a, b = backend.to_numpy(self.a[0][rows]), backend.to_numpy(self.b[0])
        return against_reference(backend.to_numpy(out[rows]), Matmul.reference(a, b), self.case.precision)


class SplitMatmul:
    """sum_i A_i @ B_i: part i multiplied on devices[i] on a CUDA stream of its own and copied,
    without blocking, to pinned host memory; the host adds the partials once every stream has
    finished (the classic multi-GPU matmul, with partial results summed on the CPU).

    `stream` makes a device's stream and `on_stream` enters it (`torch.cuda.Stream`,
    `torch.cuda.stream`, which also makes the stream's device current); a test passes fakes to
    run the same code on the CPU."""

    def __init__(self, devices: list[torch.device], shape: tuple[int, int], dtype: torch.dtype,
                 stream: Callable[[torch.device], Any] = lambda device: torch.cuda.Stream(device=device),
                 on_stream: Callable[[Any], ContextManager[Any]] = torch.cuda.stream) -> None:
        self.streams = [stream(device) for device in devices]
        self.on_stream = on_stream
        self.partials = [torch.empty(shape, device=device, dtype=dtype) for device in devices]
        pinned = all(device.type == "cuda" for device in devices)  # pinning needs CUDA
        self.host = [torch.empty(shape, dtype=dtype, pin_memory=pinned) for _ in devices]
        self.out = torch.empty(shape, dtype=dtype)

    def __call__(self, a_parts: list[torch.Tensor], b_parts: list[torch.Tensor]) -> torch.Tensor:
        for stream, a, b, partial, host in zip(self.streams, a_parts, b_parts, self.partials, self.host):
            with self.on_stream(stream):
                torch.mm(a, b, out=partial)
                host.copy_(partial, non_blocking=True)
        for stream in self.streams:
            stream.synchronize()
        self.out.copy_(self.host[0])
        for host in self.host[1:]:
            self.out.add_(host)
        return self.out


class TorchConv2d(_TorchKernel):
    """NCHW tensors; layout 'nhwc' stores them channels_last, the way torch expresses NHWC."""

    workload: Conv2d

    def setup(self) -> None:
        self._prepare()
        p = self.p
        memory_format = torch.channels_last if p["layout"] == "nhwc" else torch.contiguous_format
        self.images_nhwc = [self.workload.padded(self.rng.standard_normal(
            (p["batch"], p["h"], p["w"], p["cin"]), dtype=np.float32)) for _ in range(self.copies)]
        self.x = [backend.to_device(image.transpose(0, 3, 1, 2), self.device, self.dtype)
                  .contiguous(memory_format=memory_format) for image in self.images_nhwc]
        self.filters_hwio = self.rng.standard_normal(
            (p["kernel"], p["kernel"], p["cin"], p["cout"]), dtype=np.float32)
        self.weight = backend.to_device(self.filters_hwio.transpose(3, 2, 0, 1), self.device,
                                        self.dtype).contiguous(memory_format=memory_format)
        self.stride = int(p["stride"])
        self._conv2d = compiling.compiled(self.job, _conv2d)
        self._static_inputs([*self.x, self.weight])  # as TorchMatmul's, under CUDA graphs

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv2d(x, self.weight, self.stride)

    def _compute(self, i: int) -> torch.Tensor:
        with torch.no_grad():
            return self._conv(self.x[i])

    def step(self) -> None:
        self._record_graphs()
        with torch.no_grad():
            self._conv(self.x[next(self._order)])

    def check(self) -> Check:
        with torch.no_grad():
            out = self._conv(self.x[0][:CHECK_IMAGES])
        images = backend.to_numpy(self.x[0][:CHECK_IMAGES]).transpose(0, 2, 3, 1)
        filters = backend.to_numpy(self.weight).transpose(2, 3, 1, 0)
        # The stored images are already padded: compare against a 'valid' reference on them.
        reference = self.workload.reference(images, filters, already_padded=True)
        return against_reference(backend.to_numpy(out).transpose(0, 2, 3, 1), reference,
                                 self.case.precision)

