"""GPU paths, run for real where an NVIDIA GPU is visible (`pytest -m gpu`); skipped elsewhere."""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework, Status
from suites.hardware.devices import discover
from suites.runner.execute import execute_in_process
from suites.runner.plan import plan, unavailable_reason
from suites.runner.runner import Runner
from suites.strategies.jobs import job_for
from tests.conftest import FAST

torch = pytest.importorskip("torch")
gpu = discover(Framework.TORCH, DeviceKind.GPU)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu.available, reason=f"no GPU: {gpu.reason}")]


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("workload, params", [
    ("matmul", {"m": 1024, "n": 1024, "k": 1024}),
    ("conv2d", {"batch": 8, "h": 28, "w": 28, "cin": 64, "cout": 64, "layout": "nhwc"}),
])
def test_torch_gpu_kernels_pass_their_checks(workload, params, precision):
    case = Case.make(workload, "torch", "gpu", precision=precision, params=params)
    reason = unavailable_reason(plan(case))
    if reason:
        pytest.skip(reason)
    outcome = execute_in_process(job_for(case), FAST)
    assert outcome.status is Status.OK, outcome.reason
    assert outcome.check.passed


def test_large_bf16_gemm_reaches_a_sane_fraction_of_peak():
    case = Case.make("matmul", "torch", "gpu", precision="bf16", params={"m": 8192, "n": 8192, "k": 8192})
    reason = unavailable_reason(plan(case))  # bf16 needs compute capability >= 8.0 (a T4 or V100 has none)
    if reason:
        pytest.skip(reason)
    outcome = execute_in_process(job_for(case), FAST)
    assert outcome.status is Status.OK, outcome.reason
    tflops = 2 * 8192**3 / outcome.measurement.median / 1e12
    assert tflops > 50, f"{tflops:.1f} TFLOP/s is far below any data-centre GPU's bf16 rate"


def test_ranks_beyond_the_gpus_share_them_through_gloo_while_nccl_refuses():
    """More ranks than GPUs: NCCL needs a GPU per rank (unavailable, saying so); gloo ranks share
    the GPUs (the shared-GPU emulation) and the step passes its check, fp32 included, whose
    gradient check gathers tensor-parallel shards (a segfault on an H200 until it went through
    host copies)."""
    ranks = torch.cuda.device_count() + 1
    nccl = Case.make("allreduce", "torch", "gpu", "ddp", "fp32", ranks, {"bytes": 1024, "backend": "nccl"})
    assert (unavailable_reason(plan(nccl)) or "").startswith("NCCL needs one GPU per rank")
    for strategy in ("ddp", "tensor"):
        shared = Case.make("train_step", "torch", "gpu", strategy, "fp32", ranks, {"model": "mlp", "batch": 8})
        assert unavailable_reason(plan(shared)) is None
        outcome = Runner(FAST).launch(job_for(shared))
        assert outcome.status is Status.OK, outcome.reason
        assert outcome.check.passed


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_single_gpu_training_step_passes_its_check(precision):
    case = Case.make("train_step", "torch", "gpu", precision=precision, params={"model": "cnn", "batch": 16})
    reason = unavailable_reason(plan(case))
    if reason:
        pytest.skip(reason)
    outcome = Runner(FAST).launch(job_for(case))
    assert outcome.status is Status.OK, outcome.reason
    assert outcome.check.passed


def test_a_gpu_case_records_its_clocks_power_and_kernel_time():
    pytest.importorskip("pynvml")
    case = Case.make("matmul", "torch", "gpu", params={"m": 4096, "n": 4096, "k": 4096})
    outcome = execute_in_process(job_for(case), FAST)
    assert outcome.status is Status.OK, outcome.reason
    telemetry = outcome.measurement.telemetry
    assert telemetry is not None and telemetry.gpus, telemetry.reason if telemetry else "no telemetry"
    (first, *_) = telemetry.gpus
    assert first.sm_clock_mhz is not None and first.sm_clock_mhz.max <= (first.max_sm_clock_mhz or float("inf"))
    assert first.power_w is not None and first.power_limit_w
    # A 4096 GEMM keeps the GPU busy: its kernel time is most of the step.
    assert telemetry.kernel_s_per_step is not None
    assert telemetry.kernel_s_per_step > 0.5 * outcome.measurement.median


def test_the_reduce_overhead_mode_replays_a_training_step_as_cuda_graphs():
    case = Case.make("train_step", "torch", "gpu", compile="inductor",
                     params={"model": "mlp", "batch": 32, "compile_mode": "reduce-overhead"})
    reason = unavailable_reason(plan(case))
    if reason:
        pytest.skip(reason)
    outcome = Runner(FAST).launch(job_for(case))
    assert outcome.status is Status.OK, outcome.reason
    assert outcome.check.passed


def test_a_cuda_graphs_gemm_replay_copies_no_inputs():
    """Issue 32, N9: the rotated copies are static inputs, so a timed step replays the GEMM
    alone: no copy of A or B into the graph's own buffers runs on the GPU."""
    from torch.profiler import ProfilerActivity, profile

    from suites.frameworks.torch.kernels import TorchMatmul
    from suites.strategies.jobs import job_for

    case = Case.make("matmul", "torch", "gpu", compile="inductor",
                     params={"m": 512, "n": 512, "k": 512, "compile_mode": "reduce-overhead"})
    reason = unavailable_reason(plan(case))
    if reason:
        pytest.skip(reason)
    kernel = TorchMatmul(job_for(case))
    kernel.setup()
    try:
        kernel.compile_anew()
        kernel.step()  # compiles, and records every copy's graph
        kernel.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as profiled:
            for _ in range(2 * kernel.copies):
                kernel.step()
            kernel.synchronize()
        copies = [event.name for event in profiled.events() if "copy" in event.name.lower()
                  or "memcpy" in event.name.lower()]
        assert copies == []
    finally:
        kernel.teardown()


def test_the_energy_meter_reads_the_gpu_cuda_calls_0_by_its_uuid():
    """Issue 32, N16: the NVML device read for CUDA's GPU 0 is the one with its UUID."""
    pytest.importorskip("pynvml")
    from suites.measure.energy_meters import NvmlMeter, _nvml_uuid

    meter = NvmlMeter([0])
    assert meter.reason == "", meter.reason
    (gpu,) = meter.gpus
    assert _nvml_uuid(meter.nvml, gpu.handle) in {f"GPU-{torch.cuda.get_device_properties(0).uuid}",
                                                  f"MIG-{torch.cuda.get_device_properties(0).uuid}"}
