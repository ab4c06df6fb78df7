"""parbench predict: the analytic activation count of the standard models (hand-counted for tiny specs), its
use when no GPU record gives one, and `limited_by` from the roofline of the workload's arithmetic intensity."""
from __future__ import annotations

from dataclasses import replace

import pytest

from suites.predict.base import parse_base
from suites.predict.catalogue import Catalogue
from suites.predict.memory import autocast, memory_per_device
from suites.predict.projection import Options, parse_target, project
from suites.predict.roofline import Roofline, limited_by
from suites.predict.workload import resolve_workload
from suites.workloads.training import sized_model


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return Catalogue.load()


# --- the count, by hand -------------------------------------------------------------------------------
def test_a_tiny_transformer_block_keeps_its_norm_inputs_projection_inputs_qkv_and_feed_forward():
    spec = sized_model("transformer", {"seq": 4, "d_model": 8, "heads": 2, "ffn": 16, "layers": 1})
    # fp32, per token: 2 LayerNorm inputs 2x4x8 = 64; qkv input, q k v, attention output, ffn input
    # (6 x 8) and hidden, GELU (2 x 16) at 4 bytes = 320; log-sum-exp 2 heads x 4 = 8; fp32 input 32.
    assert spec.activation_bytes_per_sample(4, False) == 4 * (64 + 320 + 8 + 32)
    # bf16 under autocast: the norms stay fp32 (64), the rest at 2 bytes (160).
    assert spec.activation_bytes_per_sample(2, True) == 4 * (64 + 160 + 8 + 32)


def test_a_tiny_gpt2_adds_its_final_norm_head_input_and_the_losss_logits():
    spec = sized_model("gpt2_small", {"seq": 4, "d_model": 8, "heads": 2, "ffn": 16, "layers": 1, "vocab": 10})
    # autocast bf16, per token: block 64 + 160 + 8; final norm input 4 x 8 and head input 2 x 8; logits
    # 10 x (2 bf16 + 4 fp32 copy + 4 fp32 log-probs); two int64 ids (input, target).
    assert spec.activation_bytes_per_sample(2, True) == 4 * (232 + 48 + 100 + 16)
    # bf16 cast by the strategy (FSDP): norms, stream and log-probs in bf16, no fp32 copy of the logits.
    assert spec.activation_bytes_per_sample(2, False) == 4 * ((32 + 160 + 8) + 32 + 40 + 16)


def test_a_tiny_llama_counts_rms_norms_rotated_q_k_and_swiglu():
    spec = sized_model("llama_block", {"seq": 2, "d_model": 8, "heads": 2, "kv_heads": 1, "ffn": 16, "layers": 1,
                                       "vocab": 10})
    # autocast bf16, per token (d 8, kv 4): 2 RMSNorms x 8 fp32 bytes x 8 = 128; in bf16 the qkv input
    # and the gate's and up's own casts (3 x 8), fused qkv (8 + 2 x 4), rotated q (8) and k (4), attention
    # output (8), SwiGLU's four (4 x 16): 124 elements x 2; log-sum-exp 2 x 4; final norm 64 + head input 16;
    # logits 10 x 10 + 16.
    assert spec.activation_bytes_per_sample(2, True) == 2 * (128 + 248 + 8 + 80 + 116)


def test_a_tiny_cnn_keeps_every_relu_output_and_its_image():
    spec = sized_model("cnn", {"channels": 2, "blocks": 1})
    spec = replace(spec, image=4)
    # 16 pixels: stem ReLU + 2 a block = 3 x 2 x 16 = 96, pooled 2, logits 10; fp32 image 48.
    assert spec.activation_bytes_per_sample(4, False) == 4 * 108 + 4 * 48
    assert spec.activation_bytes_per_sample(2, True) == 2 * (108 + 48) + 4 * 48  # + the image's bf16 copy


def test_resnet50s_count_does_not_depend_on_its_layout():
    nchw = sized_model("resnet50", {"memory_format": "nchw"}).activation_bytes_per_sample(2, True)
    assert nchw == sized_model("resnet50", {}).activation_bytes_per_sample(2, True)
    assert 44e6 < nchw < 45e6  # 20.7 M elements saved at 2 bytes, indices and the image


# --- memory from it ---------------------------------------------------------------------------------
def test_autocast_is_16_bit_precision_unless_the_strategy_casts_the_parameters_itself():
    assert autocast(resolve_workload("resnet50", {}, "bf16", "ddp"))
    assert not autocast(resolve_workload("resnet50", {}, "bf16", "fsdp"))  # FSDP's MixedPrecisionPolicy
    assert not autocast(resolve_workload("resnet50", {}, "fp32", "ddp"))


def test_without_a_record_memory_is_state_weight_copies_and_the_analytic_count(catalogue):
    workload = resolve_workload("resnet50", {}, "bf16", "ddp")
    memory = memory_per_device(workload, catalogue.device("H100"), 8, 256, None)
    per_sample = workload.spec.activation_bytes_per_sample(2, True)
    state = workload.job(8, 256).state_estimate()["total"]
    assert memory.per_device_bytes == pytest.approx(state + 2 * workload.parameters + 256 * per_sample)
    assert memory.fits and "estimated (analytic)" in memory.note
    kinds = {i.name: i.kind for i in memory.inputs}
    assert kinds["activation_bytes_per_sample"] == kinds["autocast_weight_bytes"] == "estimated"


def test_a_gpu_record_still_comes_first(catalogue):
    base = replace(parse_base("H100 SXM:1=3981@256", catalogue), kind="measured", peak_memory_bytes=12e9,
                   state_estimate_bytes=2e9, is_gpu=True)
    workload = resolve_workload("resnet50", {}, "bf16", "single")
    memory = memory_per_device(workload, catalogue.device("H100"), 1, 256, base)
    assert memory.activation_bytes_per_sample == pytest.approx(10e9 / 256)
    assert memory.note == "" and "autocast_weight_bytes" not in {i.name for i in memory.inputs}


# --- limited_by: the roofline of the workload's intensity -----------------------------------------------
def test_the_roofline_says_compute_at_or_above_the_ridge():
    assert Roofline(100.0, 10.0, 10.0).bound == "compute"
    assert Roofline(100.0, 10.0, 10.5).bound == "memory bandwidth"


def test_an_8b_llm_at_8k_tokens_is_compute_bound_and_resnet50_in_bf16_is_not(catalogue):
    h100 = catalogue.device("H100")
    llama = resolve_workload("llama3_8b", {"seq": 8192}, "bf16", "fsdp")
    bound, inputs = limited_by(llama, h100, 2, "memory bandwidth")
    assert bound == "compute" and {i.name for i in inputs} == {"arithmetic_intensity", "ridge_flop_per_byte"}
    resnet = resolve_workload("resnet50", {}, "bf16", "ddp")
    assert limited_by(resnet, h100, 256, "compute")[0] == "memory bandwidth"
    # the same workload on a board with ten times the bandwidth is past its ridge
    fast_memory = replace(h100, bandwidth_gbs=h100.bandwidth_gbs * 10)
    assert limited_by(resnet, fast_memory, 256, "memory bandwidth")[0] == "compute"


def test_host_launch_and_gemm_bounds_keep_their_own_label(catalogue):
    resnet = resolve_workload("resnet50", {}, "bf16", "ddp")
    for label in ("host/launch", "compute (upper bound)"):
        assert limited_by(resnet, catalogue.device("H100"), 256, label) == (label, ())


def test_a_published_base_projection_states_the_roofline_inputs(catalogue):
    workload = resolve_workload("resnet50", {}, "bf16", "ddp")
    options = Options(catalogue.fabric(catalogue.default_fabric), "default")
    projection = project(workload, parse_base("H100 SXM:1=3981@256", catalogue), parse_target("H100 SXM:8", catalogue),
                         options, catalogue)
    assert projection.limited_by == "memory bandwidth" and projection.fits is True
    assert projection.inputs["ridge_flop_per_byte"].value == pytest.approx(989.4e12 / 3.35e12, rel=0.01)


def test_a_board_without_the_precision_is_that_targets_error_not_a_traceback(catalogue):
    workload = resolve_workload("resnet50", {}, "bf16", "ddp")
    options = Options(catalogue.fabric(catalogue.default_fabric), "default")
    base = parse_base("H100 SXM:1=3981@256", catalogue)
    v100 = project(workload, base, parse_target("V100 16GB:8", catalogue), options, catalogue)
    assert v100.samples_per_s is None and "has no bf16 peak" in v100.error
    assert project(workload, base, parse_target("H100 SXM:8", catalogue), options, catalogue).error is None
