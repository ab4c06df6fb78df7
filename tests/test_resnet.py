"""ResNet-50 v1.5: the spec, its torch and TF implementations from the same weights, and batch
norm's statistics under data parallelism ("local" per replica, "sync" over the global batch)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.grids.grid import load_suite
from suites.records.check import gradients_against_reference
from suites.models.resnet.spec import ResNet50, conv_out
from suites.strategies.jobs import job_for
from suites.workloads import workload_of
from suites.workloads.training import TrainStep

FAST = TimingConfig(budget_s=0.2, warmup_s=0.02, min_warmup_steps=1, min_time_s=0.02, block_min_s=0.005)
#: One bottleneck per stage, 8 wide, 32x32 images, 10 classes: ~50k parameters.
TINY = {"image": 32, "width": 8, "resnet_depth": 14, "classes": 10}


def resnet_case(framework: str, strategy: str = "single", n: int = 1, batch: int = 4, **params) -> Case:
    return Case.make("train_step", framework, "cpu", strategy, "fp32", n,
                     {"model": "resnet50", "batch": batch, **TINY, **params})


# --- the spec -------------------------------------------------------------------------------------
def test_the_default_is_resnet50_v15_with_its_published_size():
    spec = ResNet50()
    assert spec.parameter_count() == 25_557_032  # torchvision's resnet50, same layers
    assert spec.forward_flops_per_sample() / 2 == pytest.approx(4.09e9, rel=2e-3)  # 4.1 G multiply-adds
    assert spec.input_shape == (224, 224, 3) and spec.num_classes == 1000 and spec.batchnorm == "local"
    convs = {conv.name: conv for conv in spec.convolutions()}
    assert len([c for c in convs if not c.endswith(".down")]) + 1 == 50  # 49 convolutions + the head
    for stage in (2, 3, 4):  # v1.5: the stride is in the 3x3, the 1x1 reduce keeps stride 1
        assert convs[f"stage{stage}.block0.2"].stride == 2 and convs[f"stage{stage}.block0.1"].stride == 1
        assert convs[f"stage{stage}.block0.down"].stride == 2
    assert convs["stage4.block2.3"].out_size == 7 and convs["stage4.block2.3"].cout == 2048
    assert conv_out(56, 3, 2) == 28 and conv_out(112, 7, 2) == 56


def test_sizes_and_batchnorm_are_train_step_parameters_with_their_choices():
    assert TrainStep.param("resnet_depth").choices == (14, 26, 50, 101, 152)
    assert TrainStep.param("batchnorm").choices == ("local", "sync") and TrainStep.param("batchnorm").type is str
    spec = workload_of(resnet_case("torch", batchnorm="sync")).model
    assert spec == ResNet50(image=32, width=8, resnet_depth=14, classes=10, batchnorm="sync")
    assert ResNet50(resnet_depth=14).stage_blocks == (1, 1, 1, 1)


@pytest.mark.parametrize("params, expected", [
    ("batchnorm = \"global\"", "'global' is not one of local, sync"),
    ("resnet_depth = 34", "34 is not one of 14, 26, 50, 101, 152"),
    ("image = 16", "image = 16 is too small"),
])
def test_a_bad_resnet_parameter_is_one_clear_error(tmp_path: Path, params: str, expected: str):
    grid = tmp_path / "bad.toml"
    grid.write_text('[[grid]]\nworkload = "train_step"\nframework = "torch"\ndevice = "cpu"\n'
                    f'params = {{ model = "resnet50", batch = 2, {params} }}\n')
    with pytest.raises(UserError, match=expected):
        load_suite(str(grid)).cases()


def test_the_last_batch_norm_of_every_block_starts_at_zero():
    weights = ResNet50(**TINY).init_weights(0)
    assert all(not weights[name].any() for name in weights if name.endswith("bn3.gamma"))
    assert all(weights[name].all() for name in weights if name.endswith(("bn1.gamma", "bn.gamma")))


# --- which strategies compute which statistics ------------------------------------------------------
@pytest.mark.parametrize("framework, strategy, batchnorm, reason", [
    ("torch", "ddp", "sync", None),
    ("torch", "ddp", "local", None),
    ("tf", "mirrored", "sync", None),
    ("tf", "multiworker", "sync", None),
    ("tf", "single", "sync", None),
    ("tf", "towers", "local", None),
    ("tf", "towers", "sync", "manual towers run each tower's forward on its own"),
    ("torch", "fsdp", "sync", "wired to ddp only"),
    ("torch", "tensor", "local", "does not say over which samples"),
    ("torch", "pipeline", "local", "does not say over which samples"),
])
def test_each_strategy_says_how_it_computes_batch_statistics(framework, strategy, batchnorm, reason):
    case = resnet_case(framework, strategy, n=1 if strategy == "single" else 2, batchnorm=batchnorm)
    found = job_for(case).unavailable_reason()
    assert (found is None) if reason is None else (reason in found), found


def test_the_reference_computes_statistics_where_the_replicas_do():
    local, sync = (job_for(resnet_case("torch", "ddp", n=2, batchnorm=mode)) for mode in ("local", "sync"))
    assert (local.statistics_groups(), sync.statistics_groups()) == (2, 1)
    assert "per shard, 2 shards of 4" in local.workload.statistics_detail(local.statistics_groups())
    assert "over the global batch of 8" in sync.workload.statistics_detail(sync.statistics_groups())
    assert job_for(Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2,
                             {"model": "cnn", "batch": 4})).statistics_groups() == 1


# --- torch and TF: the same function, the same reference --------------------------------------------
def test_torch_and_tf_compute_the_same_resnet_gradients_from_the_same_weights():
    pytest.importorskip("torch")
    tf = pytest.importorskip("tensorflow")
    from suites.frameworks.tf.mixed import LossScaling
    from suites.frameworks.tf.trainers import SingleDeviceTrainer, TrainingSetup
    from suites.frameworks.torch.training import reference_gradients

    spec = ResNet50(**TINY)
    weights = spec.init_weights(0)
    for name in weights:  # every scale non-zero, so each block's branch is in the gradients
        if name.endswith("gamma"):
            weights[name] = np.linspace(0.5, 1.5, weights[name].size, dtype=np.float32)
    x, y = spec.make_batch(8, 3)
    per_shard = reference_gradients(spec, weights, x, y, groups=2)  # statistics of each half of the batch
    trainer = SingleDeviceTrainer(TrainingSetup(spec, weights, 8, tf.float64, LossScaling(False), tf.float64,
                                                statistics_groups=2), "/CPU:0")
    _, (tf_grads,) = trainer.checked_step(trainer.numpy_batch(x, y))
    check = gradients_against_reference(tf_grads, per_shard, "fp32")
    assert check.value < 1e-10, check
    # Statistics over the whole batch are another function: a check against the wrong reference fails.
    assert not gradients_against_reference(per_shard, reference_gradients(spec, weights, x, y), "fp32").passed


@pytest.mark.slow
def test_torch_sync_batch_norm_on_two_emulated_ranks_passes_against_the_global_batch_reference(tmp_path):
    """DDP on 2 gloo ranks with "sync": the gradients match the float64 reference whose
    statistics are over the global batch, and the record says which batch norm ran (on a CPU
    the all-reduce of per-rank sums). "local" runs torch's own batch norm per rank; its
    per-shard reference is the one the parity test above checks (the standard suite runs it)."""
    pytest.importorskip("torch")
    from suites.records.store import ResultsStore
    from suites.runner.runner import RunContext, Runner

    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    context = RunContext(suite="test", store=store, timing=FAST)
    record = Runner.storing(context).run(resnet_case("torch", "ddp", n=2, batchnorm="sync"))
    assert record.status is Status.OK, (record.reason, record.details)
    assert record.check.passed and record.check.value < 1e-4, record.check
    assert "check batch 4 of global batch 8" in record.check.detail
    assert "over the global batch of 4" in record.check.detail
    assert (record.details["batchnorm"].startswith("sync")
            and "all-reduce of per-rank sums" in record.details["batchnorm"])


#: Two replicas of a MirroredStrategy over 2 logical CPU devices (set before TF initialises, so in
#: a fresh process) run the TF ResNet's batch norm on their halves of a batch; prints the relative
#: errors of the summed gamma/beta gradients: sync vs one float64 batch, local vs two float64
#: halves, and sync vs the halves (which must differ).
TF_SYNC_SCRIPT = """
from suites.frameworks.tf import backend  # noqa: F401
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from suites.models.resnet.tf_model import _batch_norm
rng = np.random.default_rng(0)
x = rng.standard_normal((8, 3, 3, 4)) * 2 + 1
upstream = rng.standard_normal((8, 3, 3, 4))
weights = {"bn.gamma": rng.uniform(0.5, 1.5, 4), "bn.beta": rng.standard_normal(4)}

def reference(groups):
    # float64, one device: gradients w.r.t. gamma, beta of sum(bn(x_part) * upstream_part)
    w = {k: tf.Variable(v) for k, v in weights.items()}
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.reduce_sum(_batch_norm(w, "bn", xp, tf.float64, False) * up)
                         for xp, up in zip(np.split(x, groups), np.split(upstream, groups))])
    return [g.numpy() for g in tape.gradient(loss, list(w.values()))]

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    w = {k: tf.Variable(v.astype(np.float32)) for k, v in weights.items()}

def run(sync):
    def replica(xp, up):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(_batch_norm(w, "bn", xp, tf.float32, sync) * up)
        grads = tape.gradient(loss, list(w.values()))
        return tf.distribute.get_replica_context().all_reduce("sum", grads)
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: (tf.constant(np.split(x, 2)[ctx.replica_id_in_sync_group], tf.float32),
                     tf.constant(np.split(upstream, 2)[ctx.replica_id_in_sync_group], tf.float32)))
    result = tf.function(lambda a, b: strategy.run(replica, args=(a, b)))(*values)
    return [strategy.experimental_local_results(g)[0].numpy() for g in result]

def error(a, b):
    return max(float(np.linalg.norm(p - q) / np.linalg.norm(q)) for p, q in zip(a, b))

print(error(run(True), reference(1)), error(run(False), reference(2)), error(run(True), reference(2)))
"""


def test_tf_synchronized_batch_norm_over_two_replicas_equals_global_batch_statistics():
    pytest.importorskip("tensorflow")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import numpy as np\n" + TF_SYNC_SCRIPT],
                         cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    sync_vs_global, local_vs_halves, sync_vs_halves = map(float, out.stdout.split()[-3:])
    assert sync_vs_global < 1e-5 and local_vs_halves < 1e-5 and sync_vs_halves > 1e-2


# --- the layout practitioners train in ---------------------------------------------------------
def test_torch_conv_nets_default_to_channels_last_and_record_the_layout_they_ran():
    assert TrainStep.param("memory_format").choices == ("channels_last", "nchw")
    assert ResNet50(**TINY).memory_format == TrainStep.param("memory_format").default == "channels_last"
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch.training import TorchTrainStep

    for layout in ("channels_last", "nchw"):
        runnable = TorchTrainStep(job_for(resnet_case("torch", memory_format=layout)))
        runnable.setup()
        try:
            assert runnable.details["memory_format"] == layout
            x, _ = runnable.batches[0]
            assert x.is_contiguous(memory_format=torch.channels_last) is (layout == "channels_last")
        finally:
            runnable.teardown()


@pytest.mark.parametrize("model", ["resnet50", "cnn"])
def test_a_channels_last_model_holds_nhwc_kernels_and_computes_the_nchw_function(model):
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch.catalog import build

    sizes = TINY if model == "resnet50" else {}
    nchw = workload_of(Case.make("train_step", "torch", "cpu", "single", "fp32", 1,
                                 {"model": model, "batch": 2, **sizes, "memory_format": "nchw"})).model
    spec = workload_of(Case.make("train_step", "torch", "cpu", "single", "fp32", 1,
                                 {"model": model, "batch": 2, **sizes, "memory_format": "channels_last"})).model
    weights = spec.init_weights(0)
    last, plain = build(spec, weights, torch.device("cpu")), build(nchw, weights, torch.device("cpu"))
    kernel = next(p for p in last.parameters() if p.dim() == 4)
    assert kernel.is_contiguous(memory_format=torch.channels_last) and not kernel.is_contiguous()
    x = torch.from_numpy(np.ascontiguousarray(plain.input_from_canonical(spec.make_batch(2)[0])))
    assert last.in_memory_format(x).is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(last(last.in_memory_format(x)), plain(x), rtol=1e-5, atol=1e-5)


def test_nchw_is_a_torch_layout_that_tf_refuses_with_the_reason():
    reason = job_for(resnet_case("tf", memory_format="nchw")).unavailable_reason()
    assert "torch layout" in reason and "NHWC" in reason
    assert job_for(resnet_case("tf")).unavailable_reason() is None


def test_tf_local_batch_norm_runs_the_fused_kernel_and_normalises_with_the_batch_statistics():
    tf = pytest.importorskip("tensorflow")
    from suites.models.resnet.tf_model import _batch_norm

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 5, 6)).astype(np.float32) * 3 + 1
    weights = {"bn.gamma": tf.constant(rng.standard_normal(6).astype(np.float32)),
               "bn.beta": tf.constant(rng.standard_normal(6).astype(np.float32))}
    mean, variance = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))  # biased, as training normalises
    expected = (x - mean) / np.sqrt(variance + 1e-5) * weights["bn.gamma"].numpy() + weights["bn.beta"].numpy()
    fused = _batch_norm(weights, "bn", tf.constant(x), tf.float32, synchronized=False)
    np.testing.assert_allclose(fused.numpy(), expected, rtol=1e-4, atol=1e-4)
    ops = {op.type for op in tf.function(lambda t: _batch_norm(weights, "bn", t, tf.float32, False))
           .get_concrete_function(tf.TensorSpec(x.shape, tf.float32)).graph.get_operations()}
    assert "FusedBatchNormV3" in ops
