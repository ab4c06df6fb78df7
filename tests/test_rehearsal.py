"""Rehearse before renting: GPU cases on the CPU through their device code path (issue 32).

N1 and N2 passed every CPU test before they were found: N1 because the CPU's optimizers take a
per-parameter loop where CUDA's take foreach/fused kernels, N2 because no CPU suite sharded a
channels_last conv net with FSDP2. The rehearsal runs both paths here."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Precision, Status
from suites.cases.timing_config import TimingConfig
from suites.grids.grid import load_suite
from suites.runner.deadline import case_timeout as own_deadline
from suites.runner.plan import plan, unavailable_reason
from suites.strategies.jobs import job_for
from suites.runner.rehearsal import rehearsal_of
from suites.runner.runner import RunContext, Runner
from suites.records.store import ResultsStore
from suites.measure.process_env import REHEARSAL_ENV
from tests.conftest import FAST

torch = pytest.importorskip("torch")


def test_a_gpu_case_is_rehearsed_on_the_cpu_small_but_on_its_device_path():
    case = Case.make("train_step", "torch", "gpu", "fsdp", "tf32", 8,
                     {"model": "resnet50", "optimizer": "momentum", "batch": 256})
    rehearsed = rehearsal_of(case).case
    assert rehearsed.device is DeviceKind.CPU and rehearsed.n_devices == 8
    assert rehearsed.strategy == case.strategy and rehearsed.compile == case.compile
    assert rehearsed.precision is Precision.FP32  # tf32 is a tensor-core flag on the same path
    params = rehearsed.param_dict
    assert params["batch"] == 2 and params["resnet_depth"] == 14 and params["optimizer"] == "momentum"
    assert "memory_format" not in params  # channels_last, the model's default, as on the GPU


def test_a_tpu_case_says_why_it_is_not_rehearsed():
    case = Case.make("train_step", "tf", "tpu", "tpu", "bf16", 8, {"model": "mlp", "batch": 32})
    assert "TPU runtime" in rehearsal_of(case).reason


def test_strong_scaling_keeps_its_global_batch_so_it_still_splits_over_the_ranks():
    case = Case.make("train_step", "torch", "gpu", "ddp", "fp32", 2,
                     {"model": "mlp", "batch": 16, "scaling": "strong", "hidden": 4096, "depth": 4})
    params = rehearsal_of(case).case.param_dict
    assert params["batch"] == 16 and params["hidden"] == 256


@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_a_pipeline_of_many_micro_batches_stays_divisible_when_rehearsed(framework):
    """Found rehearsing the parallel suite: batch 16 x 2 devices in 8 micro-batches was rehearsed at
    2 x 2 and came back unavailable; the rehearsal keeps the global batch a multiple of them."""
    case = Case.make("train_step", framework, "gpu", "pipeline", "fp32", 2,
                     {"model": "mlp", "batch": 16, "microbatches": 8})
    params = rehearsal_of(case).case.param_dict
    assert params["batch"] == 4 and (params["batch"] * 2) % 8 == 0
    assert unavailable_reason(plan(rehearsal_of(case).case)) is None


def test_the_rehearsal_builds_the_optimizer_cuda_would(monkeypatch):
    from suites.frameworks.torch.training import make_optimizer

    layer = torch.nn.Linear(4, 4)
    assert make_optimizer("adamw", layer.parameters(), cuda_kernels=True).defaults["fused"] is True
    assert make_optimizer("momentum", layer.parameters(), cuda_kernels=True).defaults["foreach"] is True
    assert not make_optimizer("momentum", layer.parameters()).defaults["foreach"]


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    from suites.runner.launchers import free_ports

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_ports(1)[0])
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("name", ["adamw", "momentum", "adam"])
def test_n1_tensor_parallel_parameters_beside_replicated_ones_step_with_cuda_kernels(one_rank_group, name):
    """Issue 32, N1: foreach/fused kernels refuse a list mixing DTensor and Tensor parameters,
    which tensor parallelism leaves (split layers beside a replicated norm). One rank is enough
    to make DTensors; the parameters are kept apart in groups."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from suites.frameworks.torch.training import make_optimizer

    model = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    parallelize_module(model, init_device_mesh("cpu", (1,)), {"1": ColwiseParallel(), "3": RowwiseParallel()})
    optimizer = make_optimizer(name, model.parameters(), cuda_kernels=True)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()  # raised "got mixed torch.Tensor and DTensor" with one group
    assert len(optimizer.param_groups) == 2


def _standard_gpu_case(strategy: str, model: str, precision: str, n: int) -> Case:
    matches = [case for case in load_suite("standard").cases
               if case.device is DeviceKind.GPU and case.framework.value == "torch" and case.strategy.value == strategy
               and case.param_dict.get("model") == model and case.precision.value == precision
               and case.n_devices == n and "batchnorm" not in case.param_dict]
    assert matches, (strategy, model, precision, n)
    return matches[0]


#: The device paths that broke, or never ran, before the rehearsal: FSDP2 over a channels_last
#: conv net (N2), tensor parallelism over a transformer with CUDA's optimizer kernels (N1), and
#: fp16 loss scaling under FSDP's mixed precision.
REHEARSED = [("fsdp", "resnet50", "bf16", 2), ("tensor", "llama_block", "bf16", 2), ("fsdp", "llama_block", "fp16", 2),
             ("ddp", "gpt2_small", "fp16", 2), ("single", "resnet50", "fp16", 1)]


#: 45-50 s each on the 2-core VM: `slow`, so `pytest -m "not slow"` leaves them out; CI's run (tests/run.sh:
#: no marker deselected) still runs them.
@pytest.mark.out_of_ci
@pytest.mark.slow
@pytest.mark.parametrize("strategy, model, precision, n", REHEARSED)
def test_the_standard_suites_gpu_cases_rehearse_ok(tmp_path, monkeypatch, strategy, model, precision, n):
    monkeypatch.setenv(REHEARSAL_ENV, "1")
    rehearsed = rehearsal_of(_standard_gpu_case(strategy, model, precision, n)).case
    context = RunContext(suite="rehearsal", store=ResultsStore(tmp_path), timing=FAST, label="rehearsal")
    context.store.ensure_writable()
    record = Runner.storing(context).run(rehearsed)
    assert record.status is Status.OK, record.reason
    assert record.check.passed
    # N24: fsdp's bf16/fp16 (FSDP's policy) and the others' (autocast) are named apart
    expected = "MixedPrecisionPolicy" if strategy == "fsdp" else "torch.autocast"
    assert expected in record.details["mixed_precision"]


def test_n17_a_pipeline_ranks_meta_parameters_do_not_decide_the_optimizer_kernels(monkeypatch):
    from suites.frameworks.torch import training

    on_gpu = torch.nn.Linear(4, 4)
    other_stage = torch.nn.Linear(4, 4, device="meta")
    monkeypatch.setattr(torch.Tensor, "device", property(lambda t: torch.device("meta") if t.is_meta
                                                          else torch.device("cuda", 0)))
    captured = {}
    monkeypatch.setattr(torch.optim, "AdamW", lambda groups, **options: captured.update(options))
    training.make_optimizer("adamw", [*on_gpu.parameters(), *other_stage.parameters()])
    assert captured["fused"] is True


#: Issue 32, N22: TF's strict placement had never met a GPU. A rehearsal takes a TF GPU case that
#: pins ops to devices (model_parallel: each stage's variables and ops with `tf.device`) through
#: the same placement, on logical CPU devices, with soft placement off.
TF_PLACED = "train_step/tf/gpu:2/model_parallel/fp32/batch=16,model=mlp"


def test_n22_a_tf_case_that_pins_ops_to_devices_rehearses_under_strict_placement(tmp_path, monkeypatch):
    pytest.importorskip("tensorflow")
    monkeypatch.setenv(REHEARSAL_ENV, "1")
    (case,) = [case for case in load_suite("parallel").cases if case.id == TF_PLACED]
    rehearsed = rehearsal_of(case).case
    context = RunContext(suite="rehearsal", store=ResultsStore(tmp_path), timing=FAST, label="rehearsal")
    context.store.ensure_writable()
    record = Runner.storing(context).run(rehearsed)
    assert record.status is Status.OK, record.reason
    assert record.check.passed and record.emulated
    placement = record.details["device_placement"]
    assert placement.startswith("strict:") and "devices /CPU:0, /CPU:1" in placement, placement


def test_n22_a_rehearsals_runtime_refuses_an_op_pinned_where_it_cannot_run():
    """What strict means there: the rehearsed case's runtime (its own process, as the case's) has
    one logical CPU device per GPU of the case, and an op pinned to a device it lacks fails, as
    one without a GPU kernel fails on the GPU, instead of moving quietly to /CPU:0."""
    pytest.importorskip("tensorflow")
    rehearsed = rehearsal_of(Case.from_id(TF_PLACED)).case
    code = textwrap.dedent(f"""
        from suites.cases.case import Case
        from suites.frameworks.tf.distribute import configure_runtime, placement_detail
        from suites.strategies.jobs import job_for
        import tensorflow as tf

        job = job_for(Case.from_id({rehearsed.id!r}))
        configure_runtime(job)
        print(placement_detail(job).split(":")[0], len(tf.config.list_logical_devices("CPU")))
        try:
            with tf.device("/CPU:2"):
                tf.constant(1.0) * 2
            print("moved")
        except tf.errors.InvalidArgumentError:
            print("refused")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["strict", "2", "refused"], done.stdout


def test_a_rehearsed_case_gets_its_deadline_times_the_devices_each_core_carries(monkeypatch):
    """A rehearsal checks the path, not the speed: 8 emulated devices on 2 cores get 4x the time."""
    from suites.frontends import rehearse as rehearse_module

    monkeypatch.setattr(rehearse_module.os, "sched_getaffinity", lambda pid: {0, 1})
    timing = TimingConfig()
    eight = Case.from_id("train_step/torch/cpu:8/ddp/fp32/batch=16,model=mlp")
    one = Case.from_id("train_step/torch/cpu:1/single/fp32/batch=16,model=mlp")
    own = own_deadline(timing, job_for(eight))
    assert rehearse_module.rehearsal_deadline_s(eight, timing) == pytest.approx(4 * own)
    assert rehearse_module.rehearsal_deadline_s(one, timing) == pytest.approx(own_deadline(timing, job_for(one)))
    fixed = TimingConfig(case_timeout_s=30.0)
    assert rehearse_module.rehearsal_deadline_s(eight, fixed) == 30.0
