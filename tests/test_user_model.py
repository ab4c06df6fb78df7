"""Bring your own model: a builder and a loss, benchmarked across the strategies that apply."""
from __future__ import annotations

import numpy as np
import pytest

import suites
from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.errors import GridError
from suites.grids.grid import parse_suite
from suites.records.record import Record
from suites.records.store import ResultsStore
from suites.runner.plan import plan, unavailable_reason
from suites.runner.runner import RunContext, Runner

pytest.importorskip("torch")
pytest.importorskip("tensorflow")

from suites.examples.poly import POLY, build_torch, polynomial_data  # noqa: E402  (registers "poly")
from suites.frameworks.tf.models import initial_weights, summed_squared_error  # noqa: E402
from tests.real_run_timing import REAL_RUN as FAST  # noqa: E402  (the fewest steps, no re-run when contended)

#: poly without its tf builder. Its builder lives in poly.py, so worker processes that load the
#: registered plugins do not import this test module.
TORCH_ONLY_POLY = suites.user_model("torch_only_poly", input_shape=(3,), loss="mse", torch=build_torch,
                                    data=polynomial_data)


def poly_case(strategy: str, precision: str = "fp32", n: int = 1, **params: str) -> Case:
    return Case.make("train_step", "tf", "cpu", strategy, precision, n, {"model": "poly", "batch": 8, **params})


def run(case: Case, tmp_path) -> Record:
    store = ResultsStore(tmp_path / "results")
    store.ensure_writable()
    return Runner.storing(RunContext(suite="test", store=store, timing=FAST)).run(case)


def test_user_model_runs_single_in_both_frameworks_and_ddp_with_gradient_checks(tmp_path):
    records = suites.benchmark_model(POLY, batch=64, devices=["cpu"], strategies=["single", "ddp", "dataparallel"],
                                     precisions=["fp32"], results=tmp_path, timing=FAST)
    by_case = {(str(r.case.framework), str(r.case.strategy)): r for r in records}
    assert set(by_case) == {("torch", "single"), ("tf", "single"), ("torch", "ddp"), ("torch", "dataparallel")}
    for key in (("torch", "single"), ("tf", "single"), ("torch", "ddp")):
        record = by_case[key]
        assert record.status is Status.OK, record.reason
        assert record.check.passed and record.check.metric == "grad_rel_l2_err"
        assert record.metrics["samples_per_s"] > 0 and record.metrics["tflops"] > 0
    assert by_case[("torch", "ddp")].emulated
    assert by_case[("torch", "dataparallel")].status is Status.UNAVAILABLE


def test_tf_initial_weights_are_the_seeded_builders_named_by_variable_path():
    first, second = initial_weights(POLY, seed=0), initial_weights(POLY, seed=0)
    assert [w.shape for w in first.values()] == [(3, 16), (16,), (16, 1), (1,)]
    assert [name.rsplit("/", 1)[1] for name in first] == ["kernel", "bias", "kernel", "bias"]
    assert all(np.array_equal(a, b) for a, b in zip(first.values(), second.values()))
    assert np.abs(first[next(iter(first))]).max() > 0  # drawn, not zeros


def test_tf_squared_error_over_the_global_batch_is_torchs_mse_loss():
    import tensorflow as tf
    import torch

    outputs, targets = np.random.default_rng(0).standard_normal((2, 6, 3))
    tf_mean = float(summed_squared_error(tf.constant(outputs), tf.constant(targets))) / len(outputs)
    torch_mean = float(torch.nn.functional.mse_loss(torch.from_numpy(outputs), torch.from_numpy(targets)))
    assert tf_mean == pytest.approx(torch_mean, rel=1e-12)


@pytest.mark.parametrize("case", [poly_case("towers", n=2, placement="replicated"), poly_case("mirrored", n=2)],
                         ids=["towers-replicated", "mirrored"])
def test_tf_builder_data_parallel_over_two_logical_cpus_matches_the_full_batch_gradient(tmp_path, case):
    record = run(case, tmp_path)
    assert record.status is Status.OK, (record.reason, record.details)
    assert record.emulated
    assert record.check.passed and record.check.metric == "grad_rel_l2_err", record.check
    assert ("global batch 16" in record.check.detail
            and "2 copies of the variables here, identical" in record.check.detail)


def test_tf_builder_in_bf16_follows_the_fp32_loss_trajectory(tmp_path):
    record = run(poly_case("single", "bf16"), tmp_path)
    assert record.status is Status.OK, record.reason
    assert record.check.metric == "loss_traj_max_rel_err"
    assert record.check.passed and 0 < record.check.value <= record.check.tolerance


def test_a_framework_without_a_builder_is_unavailable_with_reason():
    case = Case.make("train_step", "tf", "cpu", params={"model": "torch_only_poly", "batch": 8})
    assert unavailable_reason(plan(case)) == "user model 'torch_only_poly' has no tf builder"


def test_unknown_model_in_a_grid_is_a_clear_error():
    grid = '[[grid]]\nworkload="train_step"\nframework="torch"\ndevice="cpu"\nparams={model="resnet9000",batch=8}\n'
    with pytest.raises(GridError, match="model 'resnet9000' is not one of mlp, cnn, transformer"):
        parse_suite(grid, "g.toml", "g")


def test_bad_user_model_declarations_are_refused():
    with pytest.raises(ValueError, match="at least one builder"):
        suites.user_model("nothing", input_shape=(1,), loss="mse", data=lambda b, s: (None, None))
    with pytest.raises(ValueError, match="loss 'hinge'"):
        suites.user_model("hinge", input_shape=(1,), loss="hinge", torch=lambda: None)
