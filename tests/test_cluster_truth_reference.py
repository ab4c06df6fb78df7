"""Issue 48 item 5: the fp16/bf16 check's fp32 reference on rank 0's GPU is bounded. The case's
gradients and optimizer state are freed first; a reference estimated (fp32 weights, gradients,
optimizer state, activations) over its share of what is then free on the GPU is not computed and
the check says "not checked" with the reason, as the CPU budget does. On a CPU: the GPU's free
memory is faked, and the reference's cost is the one rank 0's GPU would have."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from suites.cases.case import Case  # noqa: E402
from suites.frameworks.torch import training as torch_training  # noqa: E402
from suites.frameworks.torch.training import TorchTrainStep  # noqa: E402
from suites.measure.reference_budget import (GPU_MEMORY_SHARE, over_gpu_memory, reference_bytes,  # noqa: E402
                                             trajectory_reference_cost)
from suites.records.check import NOT_CHECKED  # noqa: E402
from suites.strategies.jobs import job_for  # noqa: E402

GIB = 2**30
SMALL_ADAMW = {"model": "mlp", "batch": 4, "optimizer": "adamw", "hidden": 32, "depth": 2}


def test_the_reference_holds_fp32_weights_gradients_optimizer_state_and_activations():
    # 8e9 parameters under AdamW (2 states): 4 x 4 bytes each; 4 MB of activations a sample x 2 samples
    assert reference_bytes(8_000_000_000, 2, 4e6, 2) == 4 * 8e9 * 4 + 8e6
    assert reference_bytes(1000, 0, None, 8) == 4 * 2000  # activations not counted: left out


def test_a_reference_over_its_share_of_the_free_gpu_memory_is_not_checked():
    cost = trajectory_reference_cost(1e12, 8, on_cpu=False, memory_bytes=70 * GIB)
    check = over_gpu_memory(cost, 60 * GIB, "ddp on 2 gpu device(s)")
    assert check is not None and not check.passed and check.metric == NOT_CHECKED
    assert (check.value, check.tolerance) == (70 * GIB, GPU_MEMORY_SHARE * 60 * GIB)
    assert "~70.0 GiB" in check.detail and "60.0 GiB free" in check.detail and "ddp on 2 gpu" in check.detail
    assert over_gpu_memory(cost, 100 * GIB) is None  # fits: computed
    assert over_gpu_memory(trajectory_reference_cost(1e12, 8, on_cpu=True, memory_bytes=70 * GIB), GIB) is None
    assert over_gpu_memory(trajectory_reference_cost(1e12, 8, on_cpu=False), GIB) is None  # not estimated


@pytest.fixture
def on_a_gpu(monkeypatch):
    """Rank 0's reference priced as on its GPU, whose free memory is `free[0]` bytes; what the
    case still held when the free memory was read is kept in `held`."""
    free, held = [0.0], []
    real_cost = torch_training.trajectory_reference_cost
    monkeypatch.setattr(torch_training, "trajectory_reference_cost",
                        lambda flops, batch, on_cpu, memory: real_cost(flops, batch, False, memory))

    def free_bytes(device: torch.device) -> float:
        held.append((len(runnables[0].optimizer.state),
                     sum(p.grad is not None for p in runnables[0].model.parameters())))
        return free[0]

    monkeypatch.setattr(torch_training, "free_device_bytes", free_bytes)
    runnables: list[TorchTrainStep] = []

    def checked(free_now: float):
        free[0] = free_now
        runnable = TorchTrainStep(job_for(Case.make("train_step", "torch", "cpu", "single", "bf16", 1, SMALL_ADAMW)))
        runnables[:] = [runnable]
        runnable.setup()
        try:
            return runnable.check(), runnable
        finally:
            runnable.teardown()
    return checked, held


def test_a_reference_that_would_not_fit_beside_the_case_is_not_computed(on_a_gpu, monkeypatch):
    checked, held = on_a_gpu

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the reference that does not fit was computed")

    monkeypatch.setattr(torch_training, "reference_losses", refuse)
    check, runnable = checked(1024.0)  # 1 KiB free: nothing fits (before: computed regardless)
    assert not check.passed and check.metric == NOT_CHECKED, check
    assert check.value == runnable._reference_bytes(runnable.job.check_job().workload) > 0
    assert "reference not computed" in check.detail and "free there once the case's gradients" in check.detail
    assert held == [(0, 0)]  # read with the case's optimizer state and gradients freed


def test_a_reference_that_fits_is_computed_and_the_case_trains_on(on_a_gpu):
    checked, held = on_a_gpu
    check, _ = checked(1e12)
    assert check.checked and check.passed, check
    assert held == [(0, 0)]
