"""train_step's size parameters and optimizer, and the analytic training-state estimate per device,
framework-neutral: no model is built here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suites.cases.case import Case
from suites.errors import GridError
from suites.grids.grid import parse_suite
from suites.records.measurement import Measurement
from suites.records.metrics import derive
from suites.hardware.peaks import PeakTable
from suites.models.llama.spec import LlamaBlock
from suites.models.resnet.spec import ResNet50
from suites.models.transformer.spec import BertBase, Gpt2Small
from suites.report.load.columns import case_fields, tidy
from suites.report.load.derived import fill_metrics
from suites.strategies.base import STATE_BYTES
from suites.strategies.jobs import case_work, job_for
from suites.strategies.registry import plugin_for
from suites.workloads import workload_of
from suites.workloads.training import (MODELS, OPTIMIZERS, SIZE_PARAMS, Mlp, ResidualCnn, TrainStep,
                                       TransformerBlock)
from suites.workloads.user_model import UserModel


def train_step(strategy: str = "single", precision: str = "fp32", n: int = 1, framework: str = "torch",
               **params) -> TrainStep:
    case = Case.make("train_step", framework, "cpu", strategy, precision, n, {"batch": 8, **params})
    workload = workload_of(case)
    assert isinstance(workload, TrainStep)
    return workload


def grid(params: str) -> str:
    return f'[[grid]]\nworkload = "train_step"\nframework = "torch"\ndevice = "cpu"\nparams = {params}\n'


def parameter_count(spec) -> int:
    return sum(int(np.prod(shape)) for shape in spec.parameter_shapes().values())


# --- sizes ----------------------------------------------------------------------------------------
def test_each_size_parameter_sizes_its_builtin_models_and_defaults_to_the_first_ones_size():
    transformers = (TransformerBlock, BertBase, Gpt2Small, LlamaBlock)
    assert SIZE_PARAMS == {"hidden": (Mlp,), "depth": (Mlp,), "channels": (ResidualCnn,), "blocks": (ResidualCnn,),
                           "seq": transformers, "d_model": transformers, "heads": transformers,
                           "ffn": transformers, "layers": transformers, "kv_heads": (LlamaBlock,),
                           "vocab": (BertBase, Gpt2Small, LlamaBlock), "memory_format": (ResidualCnn, ResNet50),
                           **{name: (ResNet50,) for name in ("image", "width", "resnet_depth", "classes", "batchnorm")}}
    for name, specs in SIZE_PARAMS.items():
        assert TrainStep.param(name).default == getattr(specs[0](), name)
        assert all(spec.name in TrainStep.param(name).help for spec in specs)
    assert TrainStep.param("optimizer").default == "sgd"
    assert TrainStep.param("layers").default == 1
    # each model keeps its own default where a case does not set the size
    assert train_step(model="gpt2_small").model.seq == 1024
    assert train_step(model="gpt2_small", seq=128).model == Gpt2Small(seq=128)


def test_a_case_without_sizes_gets_todays_model_and_its_id_lists_only_what_it_sets():
    assert train_step(model="mlp").model == Mlp() == Mlp(features=256, hidden=512, depth=3)
    assert train_step(model="cnn").model == ResidualCnn(image=32, channels=32, blocks=2)
    assert train_step(model="transformer").model == TransformerBlock(seq=64, d_model=128, heads=4, ffn=512, layers=1)
    assert train_step(model="mlp").case.id == "train_step/torch/cpu:1/single/fp32/batch=8,model=mlp"


def test_a_case_with_sizes_gets_a_model_of_those_sizes():
    assert train_step(model="mlp", hidden=1024, depth=6).model == Mlp(hidden=1024, depth=6)
    assert train_step(model="cnn", channels=64).model == ResidualCnn(channels=64, blocks=2)
    spec = train_step(model="transformer", layers=3, d_model=64, heads=8).model
    assert spec == TransformerBlock(d_model=64, heads=8, layers=3)


def test_transformer_layers_stack_identical_blocks_with_block_prefixed_names():
    one, three = TransformerBlock(), TransformerBlock(layers=3)
    block = {name.removeprefix("block0."): shape for name, shape in one.parameter_shapes().items()
             if name.startswith("block0.")}
    for i in range(3):
        assert {name.removeprefix(f"block{i}."): shape for name, shape in three.parameter_shapes().items()
                if name.startswith(f"block{i}.")} == block
    assert [name for name in three.parameter_shapes() if not name.startswith("block")] == ["head.kernel", "head.bias"]
    head_flops = 2 * 128 * 10
    assert three.forward_flops_per_sample() - head_flops == pytest.approx(
        3 * (one.forward_flops_per_sample() - head_flops))
    # one block draws the weights today's single block drew: same names in order, same values
    assert list(one.init_weights()) == [f"block0.{name}" for name in block] + ["head.kernel", "head.bias"]


def test_a_size_that_sizes_another_model_is_rejected_with_one_message():
    with pytest.raises(GridError) as raised:
        parse_suite(grid('{ model = "cnn", batch = 8, hidden = 1024 }'), "g.toml", "g")
    assert str(raised.value).count("does not apply") == 1
    assert ("size parameter hidden (mlp) does not apply to model 'cnn'; its size parameters are "
            "memory_format, channels, blocks") in str(raised.value)
    with pytest.raises(GridError, match=r"size parameters d_model \(transformer, bert_base, gpt2_small, llama_block\), "
                                        r"depth \(mlp\) do not apply"):
        parse_suite(grid('{ model = "cnn", batch = 8, depth = 2, d_model = 64 }'), "g.toml", "g")


def test_sizes_of_a_model_in_explicit_points_and_invalid_sizes():
    suite = parse_suite(grid('[{ model = "mlp", batch = 8, hidden = 2048 }, '
                             '{ model = "transformer", batch = 8, layers = 4, optimizer = "adam" }]'), "g.toml", "g")
    assert [case.param_dict for case in suite.cases] == [
        {"model": "mlp", "batch": 8, "hidden": 2048},
        {"model": "transformer", "batch": 8, "layers": 4, "optimizer": "adam"}]
    with pytest.raises(GridError, match="heads = 3 does not divide d_model = 128"):
        parse_suite(grid('{ model = "transformer", batch = 8, heads = 3 }'), "g.toml", "g")
    with pytest.raises(GridError, match="'rmsprop' is not one of sgd, adam"):
        parse_suite(grid('{ model = "mlp", batch = 8, optimizer = "rmsprop" }'), "g.toml", "g")
    with pytest.raises(GridError, match="must be >= 1"):
        parse_suite(grid('{ model = "transformer", batch = 8, layers = 0 }'), "g.toml", "g")


def test_a_case_made_outside_a_grid_with_a_foreign_size_is_unavailable_with_the_reason():
    workload = workload_of(Case.from_id("train_step/tf/cpu:1/single/fp32/batch=8,layers=2,model=mlp"))
    assert workload.unavailable_reason() == ("size parameter layers (transformer, bert_base, gpt2_small, llama_block) "
                                            "does not apply to model 'mlp'; its size parameters are hidden, depth")


def test_a_user_model_takes_no_size_parameters(monkeypatch):
    monkeypatch.setitem(MODELS, "mine", lambda: UserModel(model_name="mine", sample_shape=(4,)))
    assert TrainStep.shape_problems({"model": "mine", "batch": 8, "hidden": 8}) == [
        "size parameter hidden (mlp) does not apply to model 'mine'; it takes no size parameters"]
    assert TrainStep.shape_problems({"model": "mine", "batch": 8}) == []


# --- the training-state estimate --------------------------------------------------------------------
@pytest.mark.parametrize("optimizer, states", [("sgd", 0), ("adam", 2)])
def test_replicated_state_is_parameters_gradients_and_optimizer_states_in_fp32(optimizer, states):
    params = parameter_count(Mlp())
    weights = STATE_BYTES * params
    expected = {"parameters": weights, "gradients": weights, "optimizer": states * weights,
                "total": (2 + states) * weights}
    single = job_for(train_step(model="mlp", optimizer=optimizer).case).state_estimate()
    assert {k: v for k, v in single.items() if k != "activations"} == expected
    assert OPTIMIZERS[optimizer].states_per_parameter == states
    # data parallelism replicates it: every device holds all of it, whatever the precision
    for strategy, framework, precision in (("ddp", "torch", "bf16"), ("mirrored", "tf", "fp16"),
                                           ("towers", "tf", "fp32")):
        replicated = train_step(strategy, precision, 2, framework, model="mlp", optimizer=optimizer)
        assert {k: v for k, v in job_for(replicated.case).state_estimate().items() if k != "activations"} == expected


def test_mlp_activations_scale_with_the_per_device_batch_and_the_compute_dtype():
    per_sample = 256 + 3 * 512 + 10
    assert job_for(train_step(model="mlp").case).state_estimate()["activations"] == 8 * per_sample * 4
    assert job_for(train_step(precision="bf16", model="mlp").case).state_estimate()["activations"] == 8 * per_sample * 2
    # weak scaling: 8 per device; strong: the global 8 split over 2
    assert job_for(train_step("ddp", n=2, model="mlp").case).state_estimate()["activations"] == 8 * per_sample * 4
    assert (job_for(train_step("ddp", n=2, model="mlp", scaling="strong").case).state_estimate()["activations"]
            == 4 * per_sample * 4)
    assert (job_for(train_step(model="mlp", hidden=1024, depth=2).case).state_estimate()["activations"]
            == 8 * (256 + 2048 + 10) * 4)


def test_models_without_a_simple_activation_count_have_none_and_user_models_no_estimate(monkeypatch):
    for model in ("cnn", "transformer"):
        estimate = job_for(train_step(model=model).case).state_estimate()
        assert "activations" not in estimate and estimate["total"] > 0
    assert job_for(train_step(model="transformer", layers=2).case).state_estimate()["parameters"] == \
        STATE_BYTES * parameter_count(TransformerBlock(layers=2))
    monkeypatch.setitem(MODELS, "mine", lambda: UserModel(model_name="mine", sample_shape=(4,)))
    assert job_for(train_step(model="mine").case).state_estimate() is None


def test_a_strategy_plugin_overrides_the_accounting(monkeypatch):
    """The estimate is the case's plugin's: a sharding strategy's own accounting replaces replication."""
    workload = train_step("ddp", n=2, model="mlp", optimizer="adam")
    plugin = plugin_for(workload.case)

    def sharded(job, parameters, optimizer_states):  # ZeRO-1 over the case's devices
        state = {"parameters": 4 * parameters, "gradients": 4 * parameters,
                 "optimizer": 4 * parameters * optimizer_states // job.case.n_devices}
        return {**state, "total": sum(state.values())}

    monkeypatch.setattr(plugin, "state_bytes_per_device", sharded)
    monkeypatch.setattr(plugin, "activation_bytes_per_device", lambda job, whole: whole // 2)
    params = parameter_count(Mlp())
    estimate = job_for(workload.case).state_estimate()
    assert estimate["optimizer"] == 4 * params and estimate["total"] == 12 * params
    assert estimate["activations"] == 8 * (256 + 3 * 512 + 10) * 4 // 2


def test_records_and_reports_carry_the_estimates(tmp_path: Path):
    case = Case.make("train_step", "torch", "cpu", "ddp", "fp32", 2, {"model": "mlp", "batch": 8, "optimizer": "adam"})
    stored = derive(case, Measurement(samples=(0.01, 0.011, 0.012)), tmp_path, "box", PeakTable.load(), case_work(case),
                    job_for(case).emulated)
    estimate = job_for(case).state_estimate()
    assert stored["state_bytes_per_device_estimate"] == estimate["total"] == 16 * parameter_count(Mlp())
    assert stored["activation_bytes_per_device_estimate"] == estimate["activations"]
    kernel = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})
    assert "state_bytes_per_device_estimate" not in derive(kernel, Measurement(samples=(0.01,)), tmp_path, "box",
                                                           PeakTable.load(), case_work(kernel), False)
    # a pytest-benchmark row stored no metrics: the report computes the same estimate
    row = {"source": "pytest-benchmark", "machine": "box", **case_fields(case), "status": "ok", "run_id": "r",
           "timestamp": "2025-01-01T00:00:00+00:00", "median_s": 0.011, "samples_s": (0.011,), "iqr_s": 0.0, "n": 1}
    filled = fill_metrics(tidy([row]), case_work).iloc[0]
    assert filled["state_bytes_per_device_estimate"] == estimate["total"]
    assert filled["activation_bytes_per_device_estimate"] == estimate["activations"]
    cnn = fill_metrics(tidy([{**row, **case_fields(Case.make("train_step", "tf", "cpu", params={
        "model": "cnn", "batch": 8}))}]), case_work).iloc[0]
    assert cnn["state_bytes_per_device_estimate"] > 0 and pd.isna(cnn["activation_bytes_per_device_estimate"])
