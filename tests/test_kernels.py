"""Kernel workloads in both frameworks: correct results, FLOP counts, wrong results fail the case."""
from __future__ import annotations

import numpy as np
import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.runner.execute import execute_in_process
from suites.strategies.jobs import job_for
from suites.workloads import workload_of
from suites.workloads.kernels import Conv2d, same_padding

pytest.importorskip("torch")
pytest.importorskip("tensorflow")

CONV = {"batch": 2, "h": 9, "w": 7, "cin": 3, "cout": 4, "kernel": 3}


@pytest.mark.parametrize("framework", ["torch", "tf"])
@pytest.mark.parametrize("workload, params", [
    ("matmul", {"m": 48, "n": 40, "k": 56}),
    ("conv2d", {**CONV, "stride": 2, "padding": "same"}),   # asymmetric 'same' padding
    ("conv2d", {**CONV, "stride": 1, "padding": "valid", "layout": "nchw"}),
])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_kernels_pass_their_float64_check(framework, workload, params, precision, fast_timing):
    case = Case.make(workload, framework, "cpu", precision=precision, params=params)
    outcome = execute_in_process(job_for(case), fast_timing)
    if outcome.status is Status.UNAVAILABLE:
        pytest.skip(outcome.reason)
    assert outcome.status is Status.OK, outcome.reason
    assert outcome.check.passed and outcome.check.value < outcome.check.tolerance
    assert outcome.measurement.median > 0


def test_torch_and_tf_compute_the_same_convolution():
    """Same inputs through both frameworks, including TF's asymmetric 'same' padding."""
    import tensorflow as tf
    import torch

    case = Case.make("conv2d", "torch", "cpu", params={**CONV, "stride": 2})
    workload = Conv2d(case)
    rng = np.random.default_rng(3)
    images = rng.standard_normal((2, 9, 7, 3)).astype(np.float32)
    filters = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    tf_out = tf.nn.conv2d(images, filters, strides=2, padding="SAME").numpy()
    padded = workload.padded(images)
    torch_out = torch.nn.functional.conv2d(torch.from_numpy(padded.transpose(0, 3, 1, 2)),
                                           torch.from_numpy(filters.transpose(3, 2, 0, 1)), stride=2)
    np.testing.assert_allclose(torch_out.numpy().transpose(0, 2, 3, 1), tf_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(workload.reference(images, filters), tf_out, rtol=1e-4, atol=1e-4)
    assert same_padding(9, 3, 2) == (1, 1) and same_padding(8, 3, 2) == (0, 1)


def test_flop_counts_follow_the_documented_formulas():
    matmul = workload_of(Case.make("matmul", "torch", "cpu", params={"m": 2, "n": 3, "k": 5}))
    assert matmul.flops_per_step() == 2 * 2 * 3 * 5
    conv = workload_of(Case.make("conv2d", "tf", "cpu", params={**CONV, "stride": 2}))
    assert conv.output_hw == (5, 4)
    assert conv.flops_per_step() == 2 * 2 * 5 * 4 * 4 * 3 * 3 * 3
    assert conv.samples_per_step() == 2


def test_a_kernel_that_computes_the_wrong_thing_is_a_failed_case(monkeypatch, fast_timing):
    import torch

    real_mm = torch.mm

    def buggy_mm(a, b, out):  # a kernel that is fast and 1% wrong
        return real_mm(a, b, out=out).mul_(1.01)
    monkeypatch.setattr(torch, "mm", buggy_mm)
    case = Case.make("matmul", "torch", "cpu", params={"m": 32, "n": 32, "k": 32})
    outcome = execute_in_process(job_for(case), fast_timing)
    assert outcome.status is Status.FAILED
    assert "numerics check failed" in outcome.reason
    assert outcome.check is not None and not outcome.check.passed


def test_tf_kernel_missing_on_this_device_is_unavailable_not_failed(fast_timing, monkeypatch):
    """A CPU without oneDNN's kernels has no NCHW Conv2D in fp16 (one with AVX-512 has): TF says
    so with UnimplementedError, a fact about the platform, not a bug. Here TF is made to say it."""
    message = ("The Conv2D op currently only supports the NHWC tensor format on the CPU. "
               "The op was given the format: NCHW")

    import tensorflow as tf

    def no_nchw_kernel(*args, **kwargs):
        raise tf.errors.UnimplementedError(None, None, message)

    monkeypatch.setattr(tf.nn, "conv2d", no_nchw_kernel)
    outcome = execute_in_process(job_for(Case.make("conv2d", "tf", "cpu", precision="fp16",
                                           params={**CONV, "layout": "nchw"})), fast_timing)
    assert outcome.status is Status.UNAVAILABLE
    assert "NCHW" in outcome.reason
