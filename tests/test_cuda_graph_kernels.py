"""Kernels under torch.compile's reduce-overhead (CUDA graphs), issue 32 N9: every rotated input
copy is a static input, so a replay runs the kernel on it in place (no input copies timed), and
the first step after a compile records every copy's graph.

CUDA graphs need a GPU: here `torch.compile` is a fake that records what each call is given."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._dynamo.utils import get_static_address_type  # noqa: E402

from suites.cases.case import Case  # noqa: E402
from suites.frameworks.torch.kernels import TorchConv2d, TorchMatmul  # noqa: E402
from suites.strategies.jobs import job_for  # noqa: E402

#: Three rotated copies of a 128x128x128 GEMM's inputs (A and B: 128 KiB a set, over the 64 KiB minimum).
COPIES = 3
GEMM = {"m": 128, "n": 128, "k": 128}
GEMM_SET_BYTES = 2 * 128 * 128 * 4


@pytest.fixture
def calls(monkeypatch):
    """Each call of the compiled function: its tensor arguments."""
    seen: list[tuple[torch.Tensor, ...]] = []

    def compile(fn, mode=None):
        def graph(*args):
            seen.append(tuple(arg for arg in args if isinstance(arg, torch.Tensor)))
            return fn(*args)
        return graph

    monkeypatch.setattr(torch, "compile", compile)
    monkeypatch.setenv("PARBENCH_ROTATION_BYTES", str(COPIES * GEMM_SET_BYTES))
    return seen


def _gemm(mode: str) -> TorchMatmul:
    case = Case.make("matmul", "torch", "cpu", compile="inductor", params={**GEMM, "compile_mode": mode})
    kernel = TorchMatmul(job_for(case))
    kernel.setup()
    return kernel


def test_a_cuda_graphs_gemm_replays_each_rotated_copy_in_place(calls):
    kernel = _gemm("reduce-overhead")
    try:
        assert kernel.copies == COPIES
        # Static: a replay reads each copy where it is, instead of copying it into the graph's buffer.
        assert {get_static_address_type(t) for t in [*kernel.a, *kernel.b]} == {"unguarded"}
        inputs = [(a.data_ptr(), b.data_ptr()) for a, b in zip(kernel.a, kernel.b)]
        kernel.check()
        kernel.compile_anew()
        calls.clear()
        kernel.step()  # the first step after a compile: warm-up, then a graph per copy, then its own
        assert [(a.data_ptr(), b.data_ptr()) for a, b in calls] == inputs * 2 + inputs[:1]
        calls.clear()
        for _ in range(COPIES):
            kernel.step()  # later steps: one replay each, on the rotated copy itself
        assert [(a.data_ptr(), b.data_ptr()) for a, b in calls] == inputs[1:] + inputs[:1]
    finally:
        kernel.teardown()


def test_other_compile_modes_keep_their_inputs_ordinary_and_record_nothing(calls):
    kernel = _gemm("max-autotune")
    try:
        assert {get_static_address_type(t) for t in [*kernel.a, *kernel.b]} == {None}
        kernel.compile_anew()
        kernel.step()
        assert len(calls) == 1
    finally:
        kernel.teardown()


def test_a_cuda_graphs_conv_replays_on_static_images_and_filters(calls):
    params = {"batch": 2, "h": 16, "w": 16, "cin": 4, "cout": 4, "kernel": 3, "stride": 1,
              "compile_mode": "reduce-overhead"}
    kernel = TorchConv2d(job_for(Case.make("conv2d", "torch", "cpu", compile="inductor", params=params)))
    kernel.setup()
    try:
        assert {get_static_address_type(t) for t in [*kernel.x, kernel.weight]} == {"unguarded"}
        kernel.compile_anew()
        kernel.step()
        assert len(calls) == 2 * kernel.copies + 1
    finally:
        kernel.teardown()
