"""TF beyond data parallelism: model_parallel and pipeline (layer groups on devices, micro-batches
in one tf.function), and the classic split matmul (`towers`) in both frameworks."""
from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.processes import mark_processes

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.grids.grid import parse_suite  # noqa: E402
from suites.strategies.registry import find_plugin, plugin_for  # noqa: E402
from tests.real_run_timing import REAL_RUN  # noqa: E402
from suites.cases.vocabulary import Framework, Precision, Status, Strategy  # noqa: E402
from suites.frameworks.tf.kernels import HOST_CPU, split_matmul  # noqa: E402
from suites.frameworks.tf.mixed import LossScaling  # noqa: E402
from suites.strategies.tf.model_parallel.staged import StagedTrainer  # noqa: E402
from suites.frameworks.tf.trainers import SingleDeviceTrainer, TrainingSetup  # noqa: E402
from suites.frameworks.torch.kernels import SplitMatmul  # noqa: E402
from suites.records.check import against_reference, gradients_against_reference  # noqa: E402
from suites.records.store import ResultsStore  # noqa: E402
from suites.runner.plan import plan, unavailable_reason  # noqa: E402
from suites.runner.runner import RunContext, Runner  # noqa: E402
from suites.measure.launch import Launch  # noqa: E402
from suites.strategies.torch.towers import TOWERS_ON_CPU  # noqa: E402
from suites.workloads.kernels import Matmul  # noqa: E402
from suites.workloads.training import Mlp, ResidualCnn, TransformerBlock  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = REAL_RUN  # the fewest steps, no re-run when contended
#: Two stages on one CPU device: the placement code runs in this process (logical devices
#: would have to be set before TF initialised); the real launch path is tested below.
TWO_STAGES = ["/CPU:0", "/CPU:0"]
TINY = {"mlp": Mlp(features=12, hidden=16, depth=3), "cnn": ResidualCnn(image=6, channels=4, blocks=1),
        "transformer": TransformerBlock(seq=5, d_model=8, heads=2, ffn=16, layers=1)}


def train_case(strategy: str, n: int = 2, device: str = "cpu", **params) -> Case:
    return Case.make("train_step", "tf", device, strategy, "fp32", n,
                     {"model": "mlp", "batch": 16, **params})


def setup_of(spec, dtype=tf.float32, scaling=LossScaling(False), optimizer="sgd", batch=8) -> TrainingSetup:
    return TrainingSetup(spec, spec.init_weights(seed=2), batch, dtype, scaling,
                         tf.float64 if dtype == tf.float64 else tf.float32, optimizer=optimizer)


def float64_gradient(spec, x, y) -> dict[str, np.ndarray]:
    reference = SingleDeviceTrainer(setup_of(spec, tf.float64), "/CPU:0")
    return reference.checked_step(reference.numpy_batch(x, y))[1][0]


# --- gradient equivalence -------------------------------------------------------------------------
@pytest.mark.parametrize("model, microbatches", [("transformer", 1), ("mlp", 4), ("cnn", 2)])
def test_staged_gradient_equals_the_float64_full_batch_gradient(model, microbatches):
    spec = TINY[model]
    x, y = spec.make_batch(8, seed=5)
    trainer = StagedTrainer(setup_of(spec), TWO_STAGES, microbatches)
    assert sum(len(stage.variables) for stage in trainer.stages) == len(spec.parameter_shapes())
    assert all(stage.variables for stage in trainer.stages)  # every stage holds layers
    loss, (gradient,) = trainer.checked_step(trainer.numpy_batch(x, y))
    reference = float64_gradient(spec, x, y)
    assert list(gradient) == list(reference)  # every parameter, in the canonical order
    check = gradients_against_reference(gradient, reference, Precision.FP32, "staged")
    assert check.passed and check.value < 1e-5, check


def test_microbatches_1_is_model_parallel(monkeypatch):
    # The plugins' own trainers, on TWO_STAGES: TF may have initialised with one CPU device.
    monkeypatch.setattr("suites.frameworks.tf.distribute.replica_devices", lambda case: TWO_STAGES)
    mp_case, pipe_case = train_case("model_parallel"), train_case("pipeline", microbatches=1)
    assert (job_for(mp_case).strategy.microbatches(job_for(mp_case))
            == job_for(pipe_case).strategy.microbatches(job_for(pipe_case)) == 1)
    assert job_for(mp_case).strategy.hooks.describe(job_for(mp_case), {}).split(" ", 1)[1] == \
        job_for(pipe_case).strategy.hooks.describe(job_for(pipe_case), {}).split(" ", 1)[1]
    spec = TINY["mlp"]
    trainers = [job_for(case).strategy.hooks.trainer(setup_of(spec, optimizer="adam"), job_for(case), {}, None)
                for case in (mp_case, pipe_case)]
    for step in range(2):
        x, y = spec.make_batch(8, seed=10 + step)
        (loss_a, (grads_a,)), (loss_b, (grads_b,)) = (t.checked_step(t.numpy_batch(x, y)) for t in trainers)
        assert loss_a == loss_b
        assert all(np.array_equal(grads_a[name], grads_b[name]) for name in grads_a)
    weights_a, weights_b = (t.weight_copies()[0] for t in trainers)
    assert all(np.array_equal(weights_a[name], weights_b[name]) for name in weights_a)
    # The pipeline's bubble at one micro-batch is model parallelism's: one stage of two busy.
    assert job_for(pipe_case).strategy.bubble_fraction(job_for(pipe_case)) == 0.5


def test_an_overflow_on_one_stage_skips_the_update_on_every_stage():
    spec = TINY["mlp"]
    trainer = StagedTrainer(setup_of(spec, tf.float16, LossScaling.for_precision(Precision.FP16)),
                            TWO_STAGES, microbatches=2)
    before = trainer.weight_copies()[0]
    trainer.state.assign([2.0 ** 40, 0.0])  # the scaled loss overflows float16
    trainer.checked_step(trainer.numpy_batch(*spec.make_batch(8)))
    assert trainer.loss_scale() == 2.0 ** 39
    after = trainer.weight_copies()[0]
    assert all(np.array_equal(before[name], after[name]) for name in before)


# --- the real launch path: logical CPU devices in a fresh process -----------------------------------
def test_pipeline_case_runs_on_two_logical_devices_with_its_check_bubble_and_memory(tmp_path, monkeypatch):
    our_processes = mark_processes(monkeypatch)
    case = train_case("pipeline", microbatches=2)
    assert plugin_for(case).rules.launch is Launch.ISOLATED
    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    record = Runner.storing(RunContext(suite="test", store=store, timing=FAST)).run(case)
    assert record.status is Status.OK, (record.reason, record.details)
    assert record.emulated
    assert record.check.passed and record.check.metric == "grad_rel_l2_err", record.check
    assert "pipeline (dense0+dense1 | dense2+dense3; 2 micro-batch(es)) on 2 cpu device(s)" in record.check.detail
    assert record.metrics["pipeline_bubble"] == pytest.approx(1 / 3)
    assert record.metrics["peak_memory_bytes"] > 0 and record.metrics["training_state_bytes"] is not None
    assert record.metrics["state_bytes_per_device_estimate"] < 3 * 4 * sum(
        int(np.prod(shape)) for shape in Mlp().parameter_shapes().values())  # one stage's, not the model's
    assert our_processes() == []


def test_tf_towers_matmul_splits_k_and_its_check_compares_with_float64(monkeypatch):
    """TfMatmul's split path in this process: two parts on one CPU device (logical devices
    would have to be set before TF initialised; `replica_devices` names /CPU:0, /CPU:1 there)."""
    case = Case.make("matmul", "tf", "cpu", "towers", "fp32", 1, {"m": 256, "n": 128, "k": 512})
    monkeypatch.setattr(plugin_for(case).hooks, "kernel_devices", lambda case: TWO_STAGES)
    runnable = job_for(case).runnable()
    runnable.setup()
    assert [part.shape.as_list() for part in runnable.a[0]] == [[256, 256], [256, 256]]
    assert [part.shape.as_list() for part in runnable.b[0]] == [[256, 128], [256, 128]]
    assert runnable.details["split"] == "k = 512 split over /CPU:0, /CPU:0; partial products added on /CPU:0 (tf.add_n)"
    runnable.step()
    check = runnable.check()
    assert check.passed and check.metric == "max_rel_err", check
    runnable.fn = tf.function(lambda a, b: tf.linalg.matmul(a[0], b[0]))  # one partial product lost
    assert not runnable.check().passed


# --- the split matmul's arithmetic ------------------------------------------------------------------
def test_tf_split_matmul_adds_the_partial_products_of_k_slices():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal((96, 32), dtype=np.float32)
    parts = (tuple(tf.constant(p) for p in np.split(a, 3, axis=1)), tuple(tf.constant(p) for p in np.split(b, 3)))
    out = tf.function(split_matmul(["/CPU:0"] * 3, HOST_CPU))(*parts).numpy()
    assert against_reference(out, Matmul.reference(a, b), Precision.FP32).passed


class FakeStream:
    """Stands in for a torch.cuda.Stream: records being entered and waited for."""

    def __init__(self, device) -> None:
        self.device, self.entered, self.synchronized = device, 0, 0

    def synchronize(self) -> None:
        self.synchronized += 1


def test_torch_split_matmul_runs_each_part_on_its_stream_and_sums_on_the_host():
    streams: list[FakeStream] = []

    def enter(stream):
        stream.entered += 1
        return contextlib.nullcontext()

    split = SplitMatmul([torch.device("cpu")] * 2, (48, 16), torch.float32,
                        stream=lambda device: streams.append(FakeStream(device)) or streams[-1], on_stream=enter)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((48, 64), dtype=np.float32), rng.standard_normal((64, 16), dtype=np.float32)
    out = split([torch.from_numpy(p.copy()) for p in np.split(a, 2, axis=1)],
                [torch.from_numpy(p.copy()) for p in np.split(b, 2)])
    assert out.device.type == "cpu"
    assert against_reference(out.double().numpy(), Matmul.reference(a, b), Precision.FP32).passed
    assert [(s.entered, s.synchronized) for s in streams] == [(1, 1), (1, 1)]


# --- availability -------------------------------------------------------------------------------------
@pytest.mark.parametrize("case, expected", [
    (train_case("model_parallel", n=1), "model_parallel over one device runs the whole model there"),
    (train_case("pipeline", n=4, depth=1), "pipeline over 4 devices makes 4 stages, and model 'mlp' has 2 layers"),
    (train_case("pipeline", microbatches=3), "microbatches = 3 does not divide the global batch of 32"),
    (train_case("pipeline", device="gpu"), "no gpu"),
    (Case.make("matmul", "torch", "cpu", "towers", "fp32", 2, {"m": 64, "n": 64, "k": 64}), TOWERS_ON_CPU),
    (Case.make("matmul", "tf", "cpu", "towers", "fp32", 3, {"m": 64, "n": 64, "k": 64}),
     "k = 64 does not split evenly over 3 replicas"),
    (Case.make("train_step", "torch", "cpu", "towers", "fp32", 2, {"model": "mlp", "batch": 8}),
     "torch strategy 'towers' does not apply to train_step"),
])
def test_unavailable_cases_say_why(case, expected):
    assert expected in (unavailable_reason(plan(case)) or "")


def test_a_grid_gives_each_framework_only_the_towers_cases_it_has():
    suite = parse_suite("""
        [[grid]]
        workload = "matmul"
        framework = ["torch", "tf"]
        device = "cpu"
        strategy = "towers"
        n_devices = 2
        params = { m = 64, n = 64, k = 64 }
        [[grid]]
        workload = "train_step"
        framework = ["torch", "tf"]
        device = "cpu"
        strategy = "towers"
        n_devices = 2
        params = { model = "mlp", batch = 8 }
    """, "test", "test")
    assert sorted((case.workload, str(case.framework)) for case in suite.cases) == [
        ("matmul", "tf"), ("matmul", "torch"), ("train_step", "tf")]


def test_the_new_strategy_rules_import_no_framework():
    code = ("import sys, suites.strategies.tf.model_parallel, suites.strategies.tf.pipeline, "
            "suites.strategies.torch.towers, suites.strategies.stages; "
            "assert 'tensorflow' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60, check=True)
    assert find_plugin(Framework.TORCH, Strategy.TOWERS).rules.kinds == frozenset({"kernel"})
