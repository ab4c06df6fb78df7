"""TensorFlow forward passes of the neutral `ModelSpec`s, as plain functions of their weights.

A model here is a function ``logits = forward(weights, x, compute_dtype)`` over a mapping of
parameter name -> tensor (plain `tf.Variable`s, mirrored variables or constants), in the
canonical layout of `suites.workloads.training` (dense (in, out), conv HWIO, NHWC), which is
TensorFlow's native one. There are no Keras layers: the training loops own their variables, so
the same forward serves a single device, manual towers and every `tf.distribute` strategy.

Mixed precision follows Keras' ``mixed_float16`` / ``mixed_bfloat16`` policies: variables stay
float32 and are cast to the compute dtype where they are used; LayerNorm statistics, the
attention softmax and the loss are computed in float32 for stability; logits come back float32.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import tensorflow as tf

from ..availability import Unsupported
from ..workloads.training import ModelSpec, Mlp, ResidualCnn, TransformerBlock

LAYER_NORM_EPSILON = 1e-5

Weights = Mapping[str, tf.Tensor]
Forward = Callable[[Weights, tf.Tensor, tf.DType], tf.Tensor]


def _dense(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType, bias: bool = True) -> tf.Tensor:
    y = tf.matmul(x, tf.cast(weights[f"{name}.kernel"], dtype))
    return y + tf.cast(weights[f"{name}.bias"], dtype) if bias else y


def _conv3x3(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    y = tf.nn.conv2d(x, tf.cast(weights[f"{name}.kernel"], dtype), strides=1, padding="SAME")
    return y + tf.cast(weights[f"{name}.bias"], dtype)


def _layer_norm(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """LayerNorm over the last axis with biased variance, statistics in at least float32."""
    stats_dtype = tf.float64 if dtype == tf.float64 else tf.float32
    x32 = tf.cast(x, stats_dtype)
    mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
    normed = (x32 - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON)
    out = normed * tf.cast(weights[f"{name}.gamma"], stats_dtype) + tf.cast(weights[f"{name}.beta"], stats_dtype)
    return tf.cast(out, dtype)


def mlp_forward(spec: Mlp) -> Forward:
    def forward(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        h = tf.cast(x, dtype)
        for i in range(spec.depth):
            h = tf.nn.relu(_dense(weights, f"dense{i}", h, dtype))
        return tf.cast(_dense(weights, f"dense{spec.depth}", h, dtype), _logits_dtype(dtype))
    return forward


def cnn_forward(spec: ResidualCnn) -> Forward:
    def forward(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        h = tf.nn.relu(_conv3x3(weights, "stem", tf.cast(x, dtype), dtype))
        for b in range(spec.blocks):
            r = tf.nn.relu(_conv3x3(weights, f"block{b}.conv1", h, dtype))
            h = tf.nn.relu(h + _conv3x3(weights, f"block{b}.conv2", r, dtype))
        pooled = tf.reduce_mean(h, axis=[1, 2])
        return tf.cast(_dense(weights, "head", pooled, dtype), _logits_dtype(dtype))
    return forward


def transformer_forward(spec: TransformerBlock) -> Forward:
    heads, d_head = spec.heads, spec.d_model // spec.heads

    def split_heads(t: tf.Tensor) -> tf.Tensor:  # (B, S, D) -> (B, H, S, Dh)
        return tf.transpose(tf.reshape(t, (-1, spec.seq, heads, d_head)), (0, 2, 1, 3))

    def forward(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        x = tf.cast(x, dtype)
        h = _layer_norm(weights, "ln1", x, dtype)
        q, k, v = (split_heads(_dense(weights, f"attn.{p}", h, dtype, bias=False)) for p in "qkv")
        scores = tf.matmul(q, k, transpose_b=True) / tf.cast(math.sqrt(d_head), dtype)
        probs = tf.cast(tf.nn.softmax(tf.cast(scores, _logits_dtype(dtype)), axis=-1), dtype)
        attended = tf.reshape(tf.transpose(tf.matmul(probs, v), (0, 2, 1, 3)), (-1, spec.seq, spec.d_model))
        x = x + _dense(weights, "attn.o", attended, dtype)
        h = _layer_norm(weights, "ln2", x, dtype)
        h = tf.nn.gelu(_dense(weights, "ffn.in", h, dtype), approximate=True)
        x = x + _dense(weights, "ffn.out", h, dtype)
        pooled = tf.reduce_mean(x, axis=1)
        return tf.cast(_dense(weights, "head", pooled, dtype), _logits_dtype(dtype))
    return forward


def _logits_dtype(dtype: tf.DType) -> tf.DType:
    """Logits (and softmaxes) in float32, or float64 for a float64 reference run."""
    return tf.float64 if dtype == tf.float64 else tf.float32


FORWARDS: dict[type[ModelSpec], Callable[..., Forward]] = {
    Mlp: mlp_forward, ResidualCnn: cnn_forward, TransformerBlock: transformer_forward}


def build_forward(spec: ModelSpec) -> Forward:
    if type(spec) not in FORWARDS:
        raise Unsupported(f"TF training implements the built-in models ({', '.join(m.name for m in FORWARDS)}); "
                          f"{spec.name!r} has no TF forward here")
    return FORWARDS[type(spec)](spec)


def summed_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Sum of softmax cross-entropy over the batch; divide by the global batch for the mean."""
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
