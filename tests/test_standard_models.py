"""The standard transformers (BERT-base, GPT-2 small, the Llama stack) as language models: the
same function in torch and TensorFlow from the same weights (embeddings, blocks, LM heads,
cross-entropy over the vocabulary), the causal mask, rotary embeddings and grouped-query attention
against an independent NumPy forward, the published parameter counts, tokens/s and MFU
accounting, and the torch parallelisms' plans. Tiny sizes (and a 37-token vocabulary) throughout."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")

from suites.strategies.jobs import job_for
from suites.cases.case import Case  # noqa: E402
from suites.strategies.registry import plugin_for  # noqa: E402
from suites.cases.vocabulary import Status  # noqa: E402
from suites.frameworks.tf.catalog import build_forward  # noqa: E402
from suites.frameworks.tf.models import attend, summed_loss  # noqa: E402
from suites.frameworks.torch import catalog as torch_catalog
from suites.frameworks.torch import models as torch_models  # noqa: E402
from suites.frameworks.torch.training import reference_gradients  # noqa: E402
from suites.records.metric_registry import METRICS, Work  # noqa: E402
from suites.strategies.jobs import case_work  # noqa: E402
from suites.models.llama.spec import LlamaBlock  # noqa: E402
from suites.models.transformer.spec import BertBase, Gpt2Small  # noqa: E402
from suites.runner.runner import Runner  # noqa: E402
from suites.strategies.torch.fsdp import blocks  # noqa: E402
from suites.strategies.torch.pipeline import layer_names  # noqa: E402
from suites.strategies.torch.tensor import COLWISE, ROWWISE, tensor_plan  # noqa: E402
from suites.workloads.training import sized_model  # noqa: E402
from tests.test_torch_parallel import CPU  # noqa: E402
from tests.test_torch_strategies import context, our_processes  # noqa: E402,F401

TINY = {"bert_base": dict(seq=6, d_model=16, heads=2, ffn=24, layers=2, vocab=37),
        "gpt2_small": dict(seq=6, d_model=16, heads=2, ffn=24, layers=2, vocab=37),
        "llama_block": dict(seq=6, d_model=32, heads=4, kv_heads=2, ffn=24, layers=2, vocab=37)}


def count(spec) -> int:
    return sum(math.prod(shape) for shape in spec.parameter_shapes().values())


def torch_forward_and_gradients(spec, weights, x, y):
    model = torch_catalog.build(spec, weights, torch.device("cpu"), torch.float64)
    logits = model(model.input_tensor(x, torch.device("cpu"), torch.float64))
    return logits.detach().numpy(), reference_gradients(spec, weights, x, y)


def tf_forward_and_gradients(spec, weights, x, y):
    variables = {name: tf.Variable(array.astype(np.float64)) for name, array in weights.items()}
    forward = build_forward(spec, tf.float64)
    with tf.GradientTape() as tape:
        logits = forward(variables, tf.constant(x), tf.float64)
        loss = summed_loss(spec)(logits, tf.constant(y)) / len(y)  # the mean over every token
    grads = tape.gradient(loss, variables)
    return logits.numpy(), {name: grad.numpy() for name, grad in grads.items()}


# --- the same function in both frameworks -----------------------------------------------------------
@pytest.mark.parametrize("model", list(TINY))
def test_torch_and_tf_compute_the_same_logits_and_gradients_from_the_same_weights(model):
    spec = sized_model(model, TINY[model])
    weights = spec.init_weights(0)
    x, y = spec.make_batch(3, seed=5)
    torch_logits, torch_grads = torch_forward_and_gradients(spec, weights, x, y)
    tf_logits, tf_grads = tf_forward_and_gradients(spec, weights, x, y)
    np.testing.assert_allclose(torch_logits, tf_logits, rtol=1e-6, atol=1e-7)
    assert set(torch_grads) == set(tf_grads) == set(spec.parameter_shapes())
    for name in torch_grads:  # TF's float64 GELU / SiLU carry ~1e-9 of their own
        np.testing.assert_allclose(torch_grads[name], tf_grads[name], rtol=1e-5, atol=1e-8, err_msg=name)


def hidden_states(spec, weights, x: np.ndarray) -> np.ndarray:
    """torch: the per-token outputs before the LM head (every stage layer but the last)."""
    model = torch_catalog.build(spec, weights, torch.device("cpu"), torch.float64)
    layers = model.stage_layers()[:-1]
    return torch_models.apply_layers(layers, model._modules, torch.from_numpy(x)).detach().numpy()


@pytest.mark.parametrize("model", ["gpt2_small", "llama_block"])
def test_a_decoder_never_looks_ahead(model):
    spec = sized_model(model, TINY[model])
    weights = spec.init_weights(0)
    x, _ = spec.make_batch(2, seed=3)
    changed = x.copy()
    changed[:, 3:] = (changed[:, 3:] + 1) % spec.vocab  # other tokens from position 3 on
    before, after = hidden_states(spec, weights, x), hidden_states(spec, weights, changed)
    np.testing.assert_allclose(before[:, :3], after[:, :3], rtol=0, atol=1e-12)
    assert np.abs(before[:, 3:] - after[:, 3:]).max() > 1e-3


def test_the_encoder_looks_both_ways():
    spec = sized_model("bert_base", TINY["bert_base"])
    weights = spec.init_weights(0)
    x, _ = spec.make_batch(2, seed=3)
    changed = x.copy()
    changed[:, 3:] = (changed[:, 3:] + 1) % spec.vocab  # other tokens from position 3 on
    assert np.abs(hidden_states(spec, weights, x)[:, :3] - hidden_states(spec, weights, changed)[:, :3]).max() > 1e-3


def test_tf_causal_attention_ignores_later_keys_and_values():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 4)) for _ in range(3))
    k2, v2 = k.copy(), v.copy()
    k2[:, :, 2:], v2[:, :, 2:] = 7.0, -3.0
    out = attend(*(tf.constant(t) for t in (q, k, v)), True, tf.float64).numpy()
    moved = attend(*(tf.constant(t) for t in (q, k2, v2)), True, tf.float64).numpy()
    np.testing.assert_allclose(out[:, :2], moved[:, :2], atol=1e-12)
    assert np.abs(out[:, 2:] - moved[:, 2:]).max() > 1e-3


# --- the Llama block against an independent NumPy forward -----------------------------------------
def numpy_llama(spec: LlamaBlock, w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Written from the definitions, head by head: RMSNorm; rotary as a complex rotation of the
    pairs (i, i + d_head/2) by position x theta^(-2i/d_head); query head h reads kv head
    h // (heads / kv_heads); causal softmax; SwiGLU; final RMSNorm; the LM head at every position."""
    w = {name: value.astype(np.float64) for name, value in w.items()}
    dh, group, s = spec.d_head, spec.heads // spec.kv_heads, spec.seq

    def rms(name, t):
        return t / np.sqrt(np.mean(t * t, axis=-1, keepdims=True) + spec.rms_norm_eps) * w[name]

    def rope(t):  # (seq, dh)
        half = dh // 2
        freq = spec.rope_theta ** (-2.0 * np.arange(half) / dh)
        rotated = (t[:, :half] + 1j * t[:, half:]) * np.exp(1j * np.arange(s)[:, None] * freq)
        return np.concatenate([rotated.real, rotated.imag], axis=1)

    out = []
    for sample in x:
        h = w["tok.embedding"][sample]
        for i in range(spec.layers):
            p = f"block{i}."
            n = rms(p + "attn_norm.gamma", h)
            q, k, v = (n @ w[f"{p}attn.{c}.kernel"] for c in "qkv")
            heads = []
            for head in range(spec.heads):
                kv = head // group
                qh, kh = rope(q[:, head * dh:(head + 1) * dh]), rope(k[:, kv * dh:(kv + 1) * dh])
                scores = qh @ kh.T / np.sqrt(dh) + np.triu(np.full((s, s), -np.inf), 1)
                probs = np.exp(scores - scores.max(axis=1, keepdims=True))
                heads.append(probs / probs.sum(axis=1, keepdims=True) @ v[:, kv * dh:(kv + 1) * dh])
            h = h + np.concatenate(heads, axis=1) @ w[p + "attn.o.kernel"]
            n = rms(p + "mlp_norm.gamma", h)
            gate = n @ w[p + "ffn.gate.kernel"]
            h = h + (gate / (1 + np.exp(-gate)) * (n @ w[p + "ffn.up.kernel"])) @ w[p + "ffn.down.kernel"]
        out.append(rms("norm.gamma", h) @ w["lm_head.kernel"])
    return np.stack(out)


def test_llama_rotary_and_grouped_query_attention_match_numpy_in_both_frameworks():
    spec = sized_model("llama_block", TINY["llama_block"])
    weights = spec.init_weights(1)
    x, y = spec.make_batch(2, seed=4)
    expected = numpy_llama(spec, weights, x)
    np.testing.assert_allclose(torch_forward_and_gradients(spec, weights, x, y)[0], expected, rtol=1e-9, atol=1e-10)
    # TF's float64 SiLU carries ~1e-9 of its own; per-position logits of size ~1 show ~1e-8 of it
    np.testing.assert_allclose(tf_forward_and_gradients(spec, weights, x, y)[0], expected, rtol=1e-6, atol=1e-7)
    # grouped: 4 query heads over 2 kv heads shrink k and v to half of q
    assert spec.parameter_shapes()["block0.attn.k.kernel"] == (32, 16)


# --- sizes, FLOPs, tokens ---------------------------------------------------------------------------
def test_default_sizes_are_the_published_models():
    """Every parameter built, embeddings and LM heads included, at the published sizes: HF
    BertForMaskedLM 109,514,298 (BertModel's 109,482,240 less its 590,592 pooler, plus the MLM
    head's dense, LayerNorm and vocabulary bias), GPT-2 124,439,808 (the head tied to the
    embedding), Llama 3 8B 8,030,261,248 (the head untied)."""
    bert, gpt2, llama = BertBase(), Gpt2Small(), LlamaBlock()
    assert count(bert) == 109_482_240 - 590_592 + (768 * 768 + 768) + 2 * 768 + 30522 == 109_514_298
    assert count(gpt2) == 124_439_808
    assert count(llama) == 8_030_261_248
    assert (bert.vocab, gpt2.vocab, llama.vocab) == (30522, 50257, 128256)
    assert (bert.seq, gpt2.seq, bert.layers, gpt2.layers) == (512, 1024, 12, 12)
    assert (llama.heads, llama.kv_heads, llama.d_model, llama.ffn) == (32, 8, 4096, 14336)
    assert sized_model("gpt2_small", {"vocab": 50304}).parameter_shapes()["tok.embedding"] == (50304, 768)


@pytest.mark.parametrize("model", list(TINY))
def test_training_flops_are_six_n_plus_attention_per_token_with_the_lm_head(model):
    """PaLM's / nanoGPT's 6 N + 12 L T d per token, N the matmul weights with the vocabulary
    projection (a tied embedding counted once, as the head; its lookup is no FLOPs)."""
    spec = sized_model(model, TINY[model])
    shapes = spec.parameter_shapes()
    n = sum(math.prod(shape) for name, shape in shapes.items() if name.endswith(".kernel"))
    n += math.prod(shapes["tok.embedding"]) if spec.tied_embedding else 0
    case = Case.make("train_step", "torch", "cpu", "single", "fp32", 1, {"model": model, "batch": 3, **TINY[model]})
    work = case_work(case)
    per_token = 6 * n + 12 * spec.layers * spec.seq * spec.d_model
    assert work["tokens_per_step"] == 3 * spec.seq
    assert work["flops_per_step"] / work["tokens_per_step"] == pytest.approx(per_token)
    step = Work(median_s=0.5, n_devices=1, flops_per_step=work["flops_per_step"],
                tokens_per_step=work["tokens_per_step"], peak_table_tflops=1e-3)
    assert METRICS["tokens_per_s"].value(step) == 3 * spec.seq / 0.5
    assert METRICS["mfu_pct"].value(step) == pytest.approx(100 * work["flops_per_step"] / 0.5 / 1e9)
    assert METRICS["mfu_pct"].value(Work(median_s=0.5, n_devices=1, flops_per_step=1.0, samples_per_step=2)) is None


def test_sizes_that_make_no_llama_block_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="kv_heads = 3 does not divide heads = 8"):
        sized_model("llama_block", dict(heads=8, kv_heads=3, d_model=64))
    with pytest.raises(ValueError, match="d_head = 3 must be even"):
        sized_model("llama_block", dict(heads=4, kv_heads=2, d_model=12))
    with pytest.raises(ValueError, match="kv_heads .* does not apply to model 'gpt2_small'"):
        sized_model("gpt2_small", dict(kv_heads=2))


# --- the Llama stack under torch's parallelisms -------------------------------------------------------
def llama_case(strategy: str, **params) -> Case:
    return Case.make("train_step", "torch", "cpu", strategy, "fp32", 2,
                     {"model": "llama_block", "batch": 2, **TINY["llama_block"], **params})


def test_tensor_fsdp_and_pipeline_plans_cover_every_llama_block():
    """The embedding belongs to the first stage, the LM head to the last; tensor parallelism
    leaves both replicated; FSDP shards each as a unit."""
    spec = sized_model("llama_block", TINY["llama_block"])
    per_block = {"attn.qkv": COLWISE, "attn.o": ROWWISE,
                 "ffn.gate": COLWISE, "ffn.up": COLWISE, "ffn.down": ROWWISE}
    assert tensor_plan(spec) == {f"block{i}.{path}": style for i in range(2) for path, style in per_block.items()}
    model = torch_catalog.build(spec, spec.init_weights(0), torch.device("cpu"))
    assert all(model.get_submodule(path) for path in tensor_plan(spec))  # the plan's paths are modules
    assert blocks(model) == [model.tok, model.block0, model.block1, model.norm, model.lm_head]
    assert layer_names(spec) == [("tok", "block0"), ("block1",), ("norm", "lm_head")]
    assert [layer.names for layer in model.stage_layers()] == layer_names(spec)
    assert plugin_for(llama_case("tensor")).unavailable_reason(job_for(llama_case("tensor")), CPU) is None
    odd = llama_case("tensor", heads=4, kv_heads=1)
    assert "1 key/value heads do not split evenly over 2" in job_for(odd).strategy.unavailable_reason(job_for(odd), CPU)


def test_q_k_v_are_one_fused_layer_grouped_by_kv_head_and_the_canonical_three_round_trip():
    """torch computes q, k, v with one matmul; its output features go kv group by kv group (the
    group's query heads, its key, its value), so a column split over ranks keeps heads whole."""
    from suites.frameworks.torch.qkv import HeadLayout, fuse, unfuse

    layout = HeadLayout(heads=4, kv_heads=2, d_head=3)
    rng = np.random.default_rng(0)
    canonical = {"b.attn.q.kernel": rng.standard_normal((5, 12)), "b.attn.k.kernel": rng.standard_normal((5, 6)),
                 "b.attn.v.kernel": rng.standard_normal((5, 6)), "b.attn.o.kernel": rng.standard_normal((12, 5))}
    fused = fuse(layout, canonical)
    assert list(fused) == ["b.attn.qkv.kernel", "b.attn.o.kernel"] and fused["b.attn.qkv.kernel"].shape == (5, 24)
    second_group = fused["b.attn.qkv.kernel"][:, 12:]  # half the columns: kv head 1 with query heads 2, 3
    np.testing.assert_array_equal(second_group, np.concatenate([canonical["b.attn.q.kernel"][:, 6:],
                                                                canonical["b.attn.k.kernel"][:, 3:],
                                                                canonical["b.attn.v.kernel"][:, 3:]], axis=1))
    back = unfuse(layout, fused, list(canonical))
    assert all(np.array_equal(back[name], canonical[name]) for name in canonical)
    model = torch_catalog.build(sized_model("llama_block", TINY["llama_block"]),
                               sized_model("llama_block", TINY["llama_block"]).init_weights(0), torch.device("cpu"))
    assert model.block0.attn.qkv.weight.shape == (32 + 2 * 16, 32) and not hasattr(model.block0.attn, "q")


@pytest.mark.parametrize("model", ["gpt2_small", "bert_base"])
def test_a_tied_embedding_stays_with_fsdp_root_and_is_never_split_into_stages(model):
    """GPT-2's and BERT's token embedding is also their LM head's weight: FSDP keeps it in the
    root unit (gathered from forward to backward), and the stage-splitting strategies refuse
    the model with the reason, in both frameworks."""
    spec = sized_model(model, TINY[model])
    built = torch_catalog.build(spec, spec.init_weights(0), torch.device("cpu"))
    assert built.tok not in blocks(built) and built.block0 in blocks(built)
    assert built.stage_layers()[-1].names[-1] == "tok"  # the head reads the embedding's table
    for framework, strategy in [("torch", "pipeline"), ("tf", "model_parallel"), ("tf", "pipeline")]:
        case = Case.make("train_step", framework, "cpu", strategy, "fp32", 2,
                         {"model": model, "batch": 2, **TINY[model]})
        assert ("ties its token embedding to its LM head"
                in job_for(case).strategy.unavailable_reason(job_for(case), CPU))


@pytest.mark.slow
def test_tensor_parallel_llama_on_two_ranks_matches_the_full_batch_gradient(tmp_path, our_processes):
    """Each rank attends with 2 of the 4 query heads and 1 of the 2 kv heads, and holds half of
    the SwiGLU: the gathered gradients equal the float64 single-device ones."""
    record = Runner.storing(context(tmp_path)).run(llama_case("tensor"))
    assert record.status is Status.OK, record.reason
    assert record.check.passed and record.check.metric == "grad_rel_l2_err"
    assert record.metrics["tokens_per_s"] > 0
    assert our_processes() == []


def test_a_zero_true_gradient_is_judged_against_the_whole_gradient_and_a_wrong_one_still_fails():
    """An attention key bias has an exactly zero gradient (softmax ignores a constant added to a
    row of scores); its float32 rounding must not fail the check, a wrong gradient must."""
    from suites.cases.vocabulary import Precision
    from suites.records.check import gradients_against_reference

    reference = {"attn.k.bias": np.full(4, 1e-17), "attn.q.kernel": np.ones((4, 4))}
    rounded = {"attn.k.bias": np.full(4, 1e-8), "attn.q.kernel": np.ones((4, 4)) * (1 + 1e-7)}
    assert gradients_against_reference(rounded, reference, Precision.FP32).passed
    halved = {**rounded, "attn.q.kernel": np.ones((4, 4)) / 2}
    assert not gradients_against_reference(halved, reference, Precision.FP32).passed
    wrong_bias = {**rounded, "attn.k.bias": np.full(4, 0.1)}
    assert not gradients_against_reference(wrong_bias, reference, Precision.FP32).passed
