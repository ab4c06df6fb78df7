"""The Llama stack (`LlamaBlock`) in TensorFlow, as a plain function of its weights like every
forward of `suites.frameworks.tf.models`: RMSNorm (statistics in at least float32), rotary
embeddings (rotate-half pairing, angles computed in float64 and cast), grouped-query causal
attention (each kv head repeated for the heads / kv_heads query heads that read it), SwiGLU.
The same function as `suites.frameworks.torch.llm`, from the same canonical weights.
"""
from __future__ import annotations

from typing import Callable

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import numpy as np
import tensorflow as tf

from suites.frameworks.tf.models import Layer, Weights, attend, dense, embed, logits_dtype, split_heads
from suites.workloads.training import ModelSpec
from suites.workloads.transformers import LlamaBlock


def rms_norm(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType, epsilon: float) -> tf.Tensor:
    stats = logits_dtype(dtype)
    x32 = tf.cast(x, stats)
    normed = x32 * tf.math.rsqrt(tf.reduce_mean(tf.square(x32), axis=-1, keepdims=True) + epsilon)
    return tf.cast(normed * tf.cast(weights[f"{name}.gamma"], stats), dtype)


def rotary_tables(seq: int, d_head: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of (seq, d_head) angles: position x theta^(-2i / d_head), each half repeated."""
    inverse = theta ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)
    angles = np.tile(np.outer(np.arange(seq, dtype=np.float64), inverse), (1, 2))
    return np.cos(angles), np.sin(angles)


def rotate(x: tf.Tensor, cos: tf.Tensor, sin: tf.Tensor) -> tf.Tensor:
    """Rotary embedding of (batch, heads, seq, d_head): dimension i pairs with i + d_head / 2."""
    first, second = tf.split(x, 2, axis=-1)
    return x * cos + tf.concat([-second, first], axis=-1) * sin


def llama_layers(spec: LlamaBlock) -> list[Layer]:
    """The embedding with the first block, each further block, then the final norm and the LM
    head (the layers of `layer_names`)."""
    cos64, sin64 = rotary_tables(spec.seq, spec.d_head, spec.rope_theta)
    group = spec.heads // spec.kv_heads
    eps = spec.rms_norm_eps

    def attention(weights: Weights, prefix: str, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        q, k, v = (split_heads(dense(weights, f"{prefix}attn.{p}", h, dtype, bias=False), spec.seq, spec.d_head)
                   for p in "qkv")
        cos, sin = tf.constant(cos64, dtype), tf.constant(sin64, dtype)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = (tf.repeat(t, group, axis=1) for t in (k, v))  # kv head j serves query heads j*group...
        return dense(weights, f"{prefix}attn.o", attend(q, k, v, True, dtype), dtype, bias=False)

    def feed_forward(weights: Weights, prefix: str, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        gate = tf.nn.silu(dense(weights, f"{prefix}ffn.gate", h, dtype, bias=False))
        return dense(weights, f"{prefix}ffn.down", gate * dense(weights, f"{prefix}ffn.up", h, dtype, bias=False),
                      dtype, bias=False)

    def block(i: int) -> Layer:
        prefix = f"block{i}."

        def apply(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
            x = embed(weights, "tok", x, dtype) if i == 0 else tf.cast(x, dtype)
            x = x + attention(weights, prefix, rms_norm(weights, f"{prefix}attn_norm", x, dtype, eps), dtype)
            return x + feed_forward(weights, prefix, rms_norm(weights, f"{prefix}mlp_norm", x, dtype, eps), dtype)
        return apply

    def head(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        normed = rms_norm(weights, "norm", tf.cast(x, dtype), dtype, eps)
        return tf.cast(dense(weights, "lm_head", normed, dtype, bias=False), logits_dtype(dtype))
    return [*(block(i) for i in range(spec.layers)), head]


#: The specs of this module -> their layers (`suites.frameworks.tf.catalog.layer_forwards`).
LLM_LAYERS: dict[type[ModelSpec], Callable[..., list[Layer]]] = {LlamaBlock: llama_layers}
