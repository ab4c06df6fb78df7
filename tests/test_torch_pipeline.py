"""PyTorch pipeline and model parallelism: the split, the bubble, the state estimate, the
rules, gradient equivalence on emulated stages, and a hanging schedule that fails at its
timeout while the suite goes on."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest


torch = pytest.importorskip("torch")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.strategies.registry import find_plugin  # noqa: E402
from suites.cases.timing_config import TimingConfig  # noqa: E402
from tests.real_run_timing import REAL_RUN  # noqa: E402
from suites.cases.vocabulary import DeviceKind, Framework, Status, Strategy  # noqa: E402
from suites.frameworks.torch import catalog as torch_catalog
from suites.frameworks.torch import models as torch_models  # noqa: E402
from suites.hardware.devices import DeviceInfo  # noqa: E402
from suites.records.store import ResultsStore  # noqa: E402
from suites.runner.launchers import stuck_at  # noqa: E402
from suites.runner.runner import RunContext, Runner  # noqa: E402
from suites.strategies.torch.model_parallel import MODEL_PARALLEL_ON_CPU  # noqa: E402
from suites.strategies.base import STATE_BYTES  # noqa: E402
from suites.measure.capabilities import PipelineBubble  # noqa: E402
from suites.strategies.stages import bubble, layer_names, layer_sizes, split_layers  # noqa: E402
from suites.strategies.torch.pipeline import stage_layers  # noqa: E402
from suites.strategies.torch.model_parallel.placed import PlacedLayerGroups  # noqa: E402
from suites.workloads.training import Mlp, ResidualCnn, TransformerBlock  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = REAL_RUN  # the fewest steps, no re-run when contended
PIPELINE = find_plugin(Framework.TORCH, Strategy.PIPELINE)
MODEL_PARALLEL = find_plugin(Framework.TORCH, Strategy.MODEL_PARALLEL)
CPU = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("a CPU",))


def pipeline_case(schedule: str = "gpipe", microbatches: int = 2, n: int = 2, model: str = "mlp",
                  batch: int = 4, precision: str = "fp32", device: str = "cpu") -> Case:
    return Case.make("train_step", "torch", device, "pipeline", precision, n,
                     {"model": model, "batch": batch, "schedule": schedule, "microbatches": microbatches})


def context(tmp_path: Path, timing: TimingConfig = FAST) -> RunContext:
    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    return RunContext(suite="test", store=store, timing=timing)



# --- the theory: bubble, split, state -------------------------------------------------------
def test_bubble_is_the_idle_share_of_the_step():
    assert bubble(2, 1) == 0.5  # naive model parallelism: one of two stages busy at a time
    assert bubble(2, 4) == pytest.approx(1 / 5)
    assert bubble(4, 8) == pytest.approx(3 / 11)
    assert bubble(2, 4, stages_per_device=2) == pytest.approx(1 / 9)  # interleaved: (p-1)/(vm+p-1)
    assert bubble(1, 8) == 0.0
    assert [PIPELINE.bubble_fraction(job_for(pipeline_case("gpipe", m))) for m in (1, 2, 4, 8)] == \
        pytest.approx([1 / 2, 1 / 3, 1 / 5, 1 / 9])
    assert PIPELINE.bubble_fraction(job_for(pipeline_case("interleaved_1f1b", 4))) == pytest.approx(1 / 9)
    assert not isinstance(find_plugin(Framework.TORCH, Strategy.DDP), PipelineBubble)  # no bubble to store


def test_layers_are_the_specs_top_level_parameter_groups():
    assert layer_names(Mlp(depth=3)) == [("dense0",), ("dense1",), ("dense2",), ("dense3",)]
    assert layer_names(ResidualCnn(blocks=2)) == [("stem",), ("block0",), ("block1",), ("head",)]
    # a transformer's layers are its encoder blocks (`block{i}`, norms inside), then the head
    assert layer_names(TransformerBlock(layers=2)) == [("block0",), ("block1",), ("head",)]
    assert layer_sizes(Mlp(features=4, hidden=8, depth=1)) == [4 * 8 + 8, 8 * 10 + 10]


def test_split_is_contiguous_and_balances_the_parameters():
    assert split_layers([1, 1, 1, 1], 2) == [range(0, 2), range(2, 4)]
    assert split_layers([10, 1, 1, 1], 2) == [range(0, 1), range(1, 4)]
    assert split_layers([1, 1, 1, 10], 2) == [range(0, 3), range(3, 4)]
    assert split_layers([3, 3, 3], 3) == [range(0, 1), range(1, 2), range(2, 3)]
    assert split_layers([5, 5, 5, 5, 1], 2) == [range(0, 2), range(2, 5)]  # 10 | 11, not 15 | 6
    with pytest.raises(ValueError, match="3 layers cannot make 4"):
        split_layers([1, 1, 1], 4)


@pytest.mark.parametrize("spec", [Mlp(features=12, hidden=16, depth=3),
                                  ResidualCnn(image=6, channels=4, blocks=2),
                                  TransformerBlock(seq=5, d_model=8, heads=2, ffn=16, layers=2)],
                         ids=lambda spec: spec.name)
@pytest.mark.parametrize("parts", [2, 3])
def test_layer_groups_compose_to_the_model(spec, parts):
    """Groups of a model's stage layers, called in turn (model_parallel's placed groups, here
    all on the CPU), compute the model's function, and hold its parameters under its names."""
    model = torch_catalog.build(spec, spec.init_weights(0), torch.device("cpu"))
    layers = stage_layers(model)
    groups = [torch_models.LayerGroup(model, [layers[j] for j in group])
              for group in split_layers(layer_sizes(spec), parts)]
    placed = PlacedLayerGroups(groups, [torch.device("cpu")] * parts, torch.device("cpu"))
    x = torch.from_numpy(np.ascontiguousarray(model.input_from_canonical(spec.make_batch(3, 0)[0])))
    torch.testing.assert_close(placed(x), model(x))
    names = [name for group in groups for name, _ in group.named_parameters()]
    assert names == [name for name, _ in model.named_parameters()]


def test_state_per_device_is_the_largest_stages():
    mlp = Mlp()  # dense0 256x512 | dense1 512x512 | dense2 512x512 | dense3 512x10
    sizes = layer_sizes(mlp)
    total = sum(sizes)
    largest = sizes[0] + sizes[1]  # stages [dense0, dense1] and [dense2, dense3]
    state = PIPELINE.state_bytes_per_device(job_for(pipeline_case(model="mlp")), total, 2)
    assert state == {"parameters": largest * STATE_BYTES, "gradients": largest * STATE_BYTES,
                     "optimizer": 2 * largest * STATE_BYTES, "total": 4 * largest * STATE_BYTES}
    # interleaved: four stages of one layer each, rank 0 holds dense0 and dense2
    interleaved = PIPELINE.state_bytes_per_device(job_for(pipeline_case("interleaved_1f1b")), total, 0)
    assert interleaved["parameters"] == (sizes[0] + sizes[2]) * STATE_BYTES
    assert interleaved["total"] == 2 * interleaved["parameters"]
    on_gpus = Case.make("train_step", "torch", "gpu", "model_parallel", "fp32", 2, {"model": "mlp", "batch": 4})
    assert MODEL_PARALLEL.state_bytes_per_device(job_for(on_gpus), total, 2) == state


# --- rules ---------------------------------------------------------------------------------
def _gpus(count: int) -> DeviceInfo:
    return DeviceInfo(Framework.TORCH, DeviceKind.GPU, count, tuple(f"GPU {i}" for i in range(count)))


def test_pipeline_says_why_a_case_cannot_run():
    assert PIPELINE.unavailable_reason(job_for(pipeline_case()), CPU) is None
    assert "one stage" in PIPELINE.unavailable_reason(job_for(pipeline_case(n=1)), CPU)
    assert ("Schedule1F1B needs at least as many micro-batches as stages: microbatches = 1 < 2"
            in PIPELINE.unavailable_reason(job_for(pipeline_case("1f1b", 1)), CPU))
    assert ("microbatches = 3 does not divide the global batch of 8"
            == PIPELINE.unavailable_reason(job_for(pipeline_case("gpipe", 3)), CPU))
    assert ("interleaved_1f1b over 2 devices (2 stages each) makes 4 stages, and model 'transformer' "
            "has 2 layers to split (block0, head)"
            == PIPELINE.unavailable_reason(job_for(pipeline_case("interleaved_1f1b", model="transformer")), CPU))
    # stages cannot share a GPU: gloo has no send/recv of CUDA tensors, NCCL no two ranks on one GPU
    assert ("gloo does not do for CUDA tensors"
            in PIPELINE.unavailable_reason(job_for(pipeline_case(device="gpu")), _gpus(1)))
    assert PIPELINE.unavailable_reason(job_for(pipeline_case(device="gpu")), _gpus(2)) is None


def test_model_parallel_on_cpu_is_unavailable_and_names_its_emulated_equivalent(tmp_path):
    case = Case.make("train_step", "torch", "cpu", "model_parallel", "fp32", 2, {"model": "mlp", "batch": 4})
    record = Runner.storing(context(tmp_path)).run(case)
    assert record.status is Status.UNAVAILABLE and record.reason == MODEL_PARALLEL_ON_CPU
    assert "'pipeline' with microbatches = 1" in record.reason
    assert record.measurement is None and not record.emulated
    on_gpus = replace(case, device=DeviceKind.GPU)
    assert "needs 2 visible GPUs; 1 visible" in MODEL_PARALLEL.unavailable_reason(job_for(on_gpus), _gpus(1))
    assert MODEL_PARALLEL.unavailable_reason(job_for(on_gpus), _gpus(2)) is None
    assert "strategy 'single'" in MODEL_PARALLEL.unavailable_reason(job_for(replace(on_gpus, n_devices=1)), _gpus(2))
    assert MODEL_PARALLEL.rules.launch.value == "isolated"


def test_model_parallel_step_matches_the_full_batch_gradient_with_the_cpu_standing_in_for_gpus(monkeypatch):
    """The wrap, the step and the check of model_parallel, run in this process with both layer
    groups on the CPU (the GPU placement is the one thing a CPU-only machine cannot show)."""
    import suites.strategies.torch.model_parallel as model_parallel
    from suites.frameworks.torch.training import TorchTrainStep

    monkeypatch.setattr(model_parallel, "devices_of", lambda job: [torch.device("cpu")] * job.case.n_devices)
    case = Case.make("train_step", "torch", "cpu", "model_parallel", "fp32", 2, {"model": "transformer", "batch": 4})
    runnable = TorchTrainStep(job_for(case))
    runnable.setup()
    try:
        assert isinstance(runnable.trained, PlacedLayerGroups)
        assert len(runnable.trained.groups) == 2 and runnable.local_batch == 8  # one process, the global batch
        check = runnable.check()
        assert check.passed and check.metric == "grad_rel_l2_err", check
        runnable.step()
    finally:
        runnable.teardown()


def test_pipeline_rules_import_no_framework():
    code = ("import sys, suites.strategies.torch.pipeline, suites.strategies.torch.model_parallel; "
            "assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


def test_where_a_worker_hung_is_read_from_its_stack_dump():
    log = textwrap.dedent('''\
        some output
        Thread 0x00007f76963ed6c0 (most recent call first):
          File "/usr/lib/python3.11/threading.py", line 324 in wait

        Current thread 0x00007f7697231b80 (most recent call first):
          File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2570 in recv
          File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
          File "/venv/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py", \
line 950 in _step_microbatches
          File "/venv/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py", line 780 in step
          File "/repo/suites/strategies/torch/pipeline.py", line 300 in backward
          File "/repo/suites/frameworks/torch/training.py", line 190 in _gradient_check
          File "/repo/suites/frameworks/torch/training.py", line 180 in check
          File "/repo/suites/runner/execute.py", line 70 in execute_in_process
          File "/repo/suites/runner/case_process.py", line 99 in main
          File "<frozen runpy>", line 88 in _run_code
        ''')
    assert stuck_at(log) == ("recv (torch/distributed/distributed_c10d.py:2570) in _step_microbatches "
                             "(torch/distributed/pipelining/schedules.py:950) "
                             "via check > _gradient_check > backward")
    assert stuck_at("no dump here\n") is None


# --- emulated stages, through the launcher ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("schedule, microbatches", [("gpipe", 1), ("gpipe", 4), ("1f1b", 2)])
def test_pipeline_on_two_gloo_stages_matches_the_full_batch_gradient(tmp_path, our_processes,
                                                                     schedule, microbatches):
    record = Runner.storing(context(tmp_path)).run(pipeline_case(schedule, microbatches))
    assert record.status is Status.OK, record.reason
    assert record.emulated
    assert record.check.passed and record.check.metric == "grad_rel_l2_err"
    assert record.check.value <= record.check.tolerance == 5e-2
    assert "global batch 8" in record.check.detail
    assert len(record.measurement.rank_medians) == 2
    assert record.metrics["pipeline_bubble"] == pytest.approx(1 / (microbatches + 1))
    assert our_processes() == []


@pytest.mark.slow
def test_pipeline_fp16_follows_the_fp32_trajectory_with_loss_scaling_agreed_by_every_stage(tmp_path):
    """The loss lives on the last stage (broadcast to the others); a step whose gradients
    overflow on any stage is skipped on all of them, as in the fp32 reference."""
    case = pipeline_case("1f1b", 2, precision="fp16", model="transformer", batch=2)
    record = Runner.storing(context(tmp_path)).run(case)
    assert record.status is Status.OK, record.reason
    assert record.check.metric == "loss_traj_max_rel_err" and record.check.passed
    assert "skipped by loss scaling" in record.check.detail


HANGING_SCHEDULE = textwrap.dedent('''
    """Test-only stand-in for a schedule that hangs: Schedule1F1B's rank 1 waits for a message
    rank 0 never sends (rank 0 then waits for rank 1), both inside gloo."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import schedules

    def hang_in_a_receive(self, *args, **kwargs):
        if dist.get_rank() == 1:
            dist.recv(torch.empty(1), src=0, tag=HANG_TAG)  # a tag no pipeline message has
        return original(self, *args, **kwargs)

    HANG_TAG = 424242
    original = schedules.Schedule1F1B._step_microbatches
    schedules.Schedule1F1B._step_microbatches = hang_in_a_receive
''')


@pytest.mark.out_of_ci
@pytest.mark.slow
def test_a_hanging_schedule_fails_at_its_timeout_saying_where_and_the_suite_goes_on(
        tmp_path, monkeypatch, our_processes):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(HANGING_SCHEDULE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(plugin), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    timing = replace(FAST, case_timeout_s=45.0)
    started = time.monotonic()
    cases = [pipeline_case("1f1b", 2), pipeline_case("gpipe", 2)]
    records = list(Runner.storing(context(tmp_path, timing)).run_all(cases))
    assert [r.status for r in records] == [Status.FAILED, Status.OK], records[1].reason
    hung = records[0].reason
    assert hung.startswith("rank 0 did not finish within 45 s (killed); hung: "), hung
    assert "rank 0 in " in hung and "rank 1 in recv (torch/distributed/distributed_c10d.py:" in hung
    assert "in hang_in_a_receive (sitecustomize.py:" in hung  # what called the receive that hung
    assert "via check > _gradient_check > _backward > backward" in hung  # the schedule's step, from the check
    assert time.monotonic() - started < 45 + 90, "the suite waited past the hung case's timeout"
    assert our_processes() == []
