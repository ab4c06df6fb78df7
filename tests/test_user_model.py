"""Bring your own model: a builder and a loss, benchmarked across the strategies that apply."""
from __future__ import annotations

import pytest

import suites
from suites.availability import unavailable_reason
from suites.case import Case
from suites.errors import GridError
from suites.grid import parse_suite
from suites.vocabulary import Status

pytest.importorskip("torch")

from suites.examples.poly import POLY  # noqa: E402  (registers "poly")
from tests.conftest import FAST  # noqa: E402


def test_user_model_runs_single_and_ddp_with_gradient_checks(tmp_path):
    records = suites.benchmark_model(POLY, batch=64, devices=["cpu"], strategies=["single", "ddp", "dataparallel"],
                                     precisions=["fp32"], results=tmp_path, timing=FAST)
    by_strategy = {str(r.case.strategy): r for r in records}
    assert set(by_strategy) == {"single", "ddp", "dataparallel"}
    for strategy in ("single", "ddp"):
        record = by_strategy[strategy]
        assert record.status is Status.OK, record.reason
        assert record.check.passed and record.check.metric == "grad_rel_l2_err"
        assert record.metrics["samples_per_s"] > 0 and record.metrics["tflops"] > 0
    assert by_strategy["ddp"].emulated
    assert by_strategy["dataparallel"].status is Status.UNAVAILABLE


def test_a_framework_without_a_builder_is_unavailable_with_reason():
    case = Case.make("train_step", "tf", "cpu", params={"model": "poly", "batch": 8})
    assert unavailable_reason(case) == "user model 'poly' has no tf builder"


def test_unknown_model_in_a_grid_is_a_clear_error():
    grid = '[[grid]]\nworkload="train_step"\nframework="torch"\ndevice="cpu"\nparams={model="resnet9000",batch=8}\n'
    with pytest.raises(GridError, match="model 'resnet9000' is not one of mlp, cnn, transformer"):
        parse_suite(grid, "g.toml", "g")


def test_bad_user_model_declarations_are_refused():
    with pytest.raises(ValueError, match="at least one builder"):
        suites.user_model("nothing", input_shape=(1,), loss="mse", data=lambda b, s: (None, None))
    with pytest.raises(ValueError, match="loss 'hinge'"):
        suites.user_model("hinge", input_shape=(1,), loss="hinge", torch=lambda: None)
