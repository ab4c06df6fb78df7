"""The training check: well-conditioned, sized independently of the global batch, timed and
measured, and still failing what it must: each injected fault (`suites.measure.faults`) turns the
case `failed` with a reason that names it."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Precision, Status
from suites.errors import UserError
from suites.records.check import gradients_against_reference
from suites.measure import faults
from suites.strategies.jobs import job_for

FAST = TimingConfig(budget_s=0.2, warmup_s=0.02, min_warmup_steps=1, min_time_s=0.02, block_min_s=0.005)
#: One bottleneck per stage, 8 wide, 32x32 images, 10 classes (tests/test_resnet.py's).
TINY_RESNET = {"model": "resnet50", "image": 32, "width": 8, "resnet_depth": 14, "classes": 10}


def train_case(framework: str, strategy: str, n: int, batch: int = 4, **params: object) -> Case:
    return Case.make("train_step", framework, "cpu", strategy, "fp32", n, {"model": "mlp", "batch": batch, **params})


# --- the comparison ---------------------------------------------------------------------------
def test_a_small_parameters_rounding_passes_and_a_wrong_shard_fails():
    """Relative to its own tiny norm a batch-norm scale's rounding reads 10%; against its norm
    plus 1% of the whole gradient's it is far inside fp32's tolerance. Half of a large
    parameter's gradient moved (a wrong shard) fails, and so does a missing parameter."""
    rng = np.random.default_rng(0)
    reference = {"kernel": rng.standard_normal((64, 64)), "gamma": 1e-4 * rng.standard_normal(8)}
    rounded = {"kernel": reference["kernel"] * (1 + 1e-7), "gamma": reference["gamma"] * 1.1}
    assert gradients_against_reference(rounded, reference, Precision.FP32).passed
    shard = reference["kernel"].copy()
    shard[:32] = reference["kernel"][32:]
    check = gradients_against_reference({**reference, "kernel": shard}, reference, Precision.FP32)
    assert not check.passed and check.value > 0.5 and "worst parameter kernel" in check.detail
    assert not gradients_against_reference({"kernel": reference["kernel"]}, reference, Precision.FP32).passed


# --- the check's batch ------------------------------------------------------------------------
@pytest.mark.parametrize("strategy, n, batch, params, check_batch", [
    ("single", 1, 512, {}, 2), ("ddp", 8, 64, {}, 16), ("ddp", 2, 1, {}, 2),
    ("ddp", 2, 256, {"scaling": "strong"}, 4), ("pipeline", 2, 32, {"microbatches": 8}, 8)])
def test_the_check_batch_is_a_few_samples_per_device_whatever_the_global_batch(strategy, n, batch, params,
                                                                               check_batch):
    work = job_for(train_case("torch", strategy, n, batch, **params)).check_job().workload
    assert work.global_batch == check_batch
    assert (work.case.strategy, work.case.n_devices, work.p["model"]) == (strategy, n, "mlp")


def test_the_check_records_its_time_and_memory_beside_its_verdict():
    pytest.importorskip("torch")
    from suites.runner.execute import measured_check

    runnable = job_for(train_case("torch", "single", 1, batch=64)).runnable()
    runnable.setup()
    try:
        check = measured_check(runnable)
    finally:
        runnable.teardown()
    assert check.passed and check.check_s > 0 and check.memory_bytes >= 0
    assert "check batch 2 of global batch 64" in check.detail


def test_an_unknown_fault_is_an_error_naming_the_known_ones(monkeypatch):
    monkeypatch.setenv(faults.FAULT_ENV, "nonsense")
    with pytest.raises(UserError, match="INJECT_FAULT='nonsense' is not valid: expected one of not_all_reduced"):
        faults.injected()
    monkeypatch.delenv(faults.FAULT_ENV)
    assert faults.injected() is None and faults.detail() == ""


# --- injected faults fail the case ---------------------------------------------------------------
def _failed_by(fault: faults.Fault, case: Case, tmp_path: Path, monkeypatch) -> str:
    """Run `case` with `fault` injected (rank processes inherit it): it fails, and its check's
    detail (returned) names the fault."""
    from suites.records.store import ResultsStore
    from suites.runner.runner import RunContext, Runner

    monkeypatch.setenv(faults.FAULT_ENV, fault.value)
    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    record = Runner.storing(RunContext(suite="test", store=store, timing=FAST)).run(case)
    assert record.status is Status.FAILED and "numerics check failed" in record.reason, record.reason
    assert not record.check.passed and f"fault injected: {fault.value}" in record.check.detail, record.check
    return record.check.detail


@pytest.mark.slow
@pytest.mark.parametrize("fault, case", [
    (faults.Fault.NOT_ALL_REDUCED, train_case("torch", "ddp", 2)),
    (faults.Fault.SCALED_TWICE, train_case("torch", "ddp", 2)),
    (faults.Fault.WRONG_SHARD, train_case("torch", "fsdp", 2)),
    (faults.Fault.DROPPED_MICROBATCH, train_case("torch", "pipeline", 2, microbatches=2)),
    (faults.Fault.FLIPPED_BATCHNORM, train_case("torch", "ddp", 2, **TINY_RESNET, batchnorm="local")),
    (faults.Fault.FLIPPED_BATCHNORM, train_case("torch", "ddp", 2, **TINY_RESNET, batchnorm="sync")),
], ids=["not_all_reduced", "scaled_twice", "wrong_shard", "dropped_microbatch", "local_bn_synced",
        "sync_bn_local"])
def test_an_injected_strategy_bug_fails_the_torch_case(fault, case, tmp_path, monkeypatch, our_processes):
    pytest.importorskip("torch")
    detail = _failed_by(fault, case, tmp_path, monkeypatch)
    if fault is faults.Fault.NOT_ALL_REDUCED:  # rank 0's gradients are right; rank 1's are not
        assert "rank 1 of 2 (the worst)" in detail
    assert our_processes() == []


@pytest.mark.out_of_ci
@pytest.mark.slow
def test_tf_mirrored_batch_norm_synchronised_where_it_should_be_local_fails(tmp_path, monkeypatch, our_processes):
    """Two replicas over 2 logical CPU devices (a fresh process)."""
    pytest.importorskip("tensorflow")
    _failed_by(faults.Fault.FLIPPED_BATCHNORM, train_case("tf", "mirrored", 2, **TINY_RESNET, batchnorm="local"),
               tmp_path, monkeypatch)
    assert our_processes() == []


def test_a_stale_parameter_server_update_counted_as_fresh_fails(monkeypatch):
    """Two asynchronous updates, the second computed at the weights the first moved (one SGD
    step). Each checked at the weights it read, they pass; the second claiming to have read the
    initial weights (a stale update counted as fresh) fails."""
    tf = pytest.importorskip("tensorflow")
    from suites.frameworks.tf.mixed import LossScaling
    from suites.strategies.tf.parameter_server.trainer import WorkerUpdate
    from suites.frameworks.tf.trainers import SingleDeviceTrainer
    from suites.frameworks.tf.training import CHECK_SEED, TfTrainStep

    from tests.test_tf_cluster import _Updates

    step = TfTrainStep(job_for(train_case("tf", "single", 1, batch=8)))
    step.setup()
    x, y = step.spec.make_batch(2, CHECK_SEED)  # the check batch: 2 samples

    def update(rows: slice, weights: dict[str, np.ndarray]) -> WorkerUpdate:
        trainer = SingleDeviceTrainer(replace(step._training_setup(tf.float32, LossScaling(False)),
                                              weights=weights, global_batch=1), "/CPU:0")
        loss, (gradients,) = trainer.checked_step(trainer.numpy_batch(x[rows], y[rows]))
        return WorkerUpdate(rows, dict(weights), gradients, loss)

    first = update(slice(0, 1), step.weights)
    moved = {name: step.weights[name] - 0.01 * first.gradients[name] for name in step.weights}
    updates = [first, update(slice(1, 2), moved)]
    step.check_trainer = lambda work: _Updates(updates, 1, step.weights)
    assert step.check().passed
    monkeypatch.setenv(faults.FAULT_ENV, faults.Fault.STALE_UPDATE.value)
    check = step.check()
    assert not check.passed and "2 read the initial weights" in check.detail
    assert "fault injected: stale_update" in check.detail
    step.teardown()




def test_the_tf_check_leaves_the_timed_xla_step_alone():
    """The check steps a trainer of its own at its own batch, so nothing of it compiles (or
    autotunes) the timed step's program: the timed step's first call is its compile, as in a
    fresh process and as torch's is, and `compile_s` is comparable across frameworks."""
    pytest.importorskip("tensorflow")
    from suites.frameworks.tf.training import TfTrainStep

    case = Case.make("train_step", "tf", "cpu", params={"model": "mlp", "batch": 8, "hidden": 16}, compile="xla")
    step = TfTrainStep(job_for(case))
    step.setup()
    try:
        def untouchable(*args):
            raise AssertionError("the check ran the timed trainer")

        step.trainer.checked_step = step.trainer.step = untouchable
        assert step.check().passed
        assert step.compilations() == 0
    finally:
        step.teardown()
