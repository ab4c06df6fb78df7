"""TensorFlow forward passes of the neutral `ModelSpec`s, as plain functions of their weights.

A model here is a function ``logits = forward(weights, x, compute_dtype)`` over a mapping of
parameter name -> tensor (plain `tf.Variable`s, mirrored variables or constants), in the
canonical layout of `suites.workloads.training` (dense (in, out), conv HWIO, NHWC), which is
TensorFlow's native one. The built-in models have no Keras layers: the training loops own their
variables, so the same forward serves a single device, manual towers and every `tf.distribute`
strategy. A user model's Keras model joins the same way: its forward is
`model.stateless_call` with the loops' variables in place of the model's own, and its initial
weights are the ones its builder drew (`initial_weights`).

Mixed precision follows Keras' ``mixed_float16`` / ``mixed_bfloat16`` policies: variables stay
float32 and are cast to the compute dtype where they are used; LayerNorm statistics, the
attention softmax and the loss are computed in float32 for stability; logits come back float32.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Mapping

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import keras
import numpy as np
import tensorflow as tf

from suites.cases.vocabulary import Framework
from suites.frameworks.tf.mixed import keras_dtype_policy
from suites.run.availability import Unsupported
from suites.workloads.resnet import ResNet50
from suites.workloads.training import ModelSpec, Mlp, ResidualCnn, TransformerBlock
from suites.workloads.user_model import USER_MODEL_SEED, UserModel

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

    def block(weights: Weights, prefix: str, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        h = _layer_norm(weights, f"{prefix}ln1", x, dtype)
        q, k, v = (split_heads(_dense(weights, f"{prefix}attn.{p}", h, dtype, bias=False)) for p in "qkv")
        scores = tf.matmul(q, k, transpose_b=True) / tf.cast(math.sqrt(d_head), dtype)
        probs = tf.cast(tf.nn.softmax(tf.cast(scores, _logits_dtype(dtype)), axis=-1), dtype)
        attended = tf.reshape(tf.transpose(tf.matmul(probs, v), (0, 2, 1, 3)), (-1, spec.seq, spec.d_model))
        x = x + _dense(weights, f"{prefix}attn.o", attended, dtype)
        h = _layer_norm(weights, f"{prefix}ln2", x, dtype)
        h = tf.nn.gelu(_dense(weights, f"{prefix}ffn.in", h, dtype), approximate=True)
        return x + _dense(weights, f"{prefix}ffn.out", h, dtype)

    def forward(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        x = tf.cast(x, dtype)
        for i in range(spec.layers):
            x = block(weights, f"block{i}.", x, dtype)
        pooled = tf.reduce_mean(x, axis=1)
        return tf.cast(_dense(weights, "head", pooled, dtype), _logits_dtype(dtype))
    return forward


def _logits_dtype(dtype: tf.DType) -> tf.DType:
    """Logits (and softmaxes) in float32, or float64 for a float64 reference run."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def _keras_model(spec: UserModel, compute_dtype: tf.DType) -> keras.Model:
    """The user's Keras model, built after seeding Keras under the dtype policy that computes in
    `compute_dtype` (a layer's policy is fixed when it is made), and called on a zero batch so
    that its variables exist."""
    if Framework.TF not in spec.builders:
        raise Unsupported(f"user model {spec.model_name!r} has no tf builder")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(keras_dtype_policy(compute_dtype))
    try:
        keras.utils.set_random_seed(USER_MODEL_SEED)
        model = spec.builders[Framework.TF]()
        model(np.zeros((1, *spec.input_shape), np.float32))
    finally:
        keras.config.set_dtype_policy(previous)
    return model


def _unique_names(paths: list[str]) -> list[str]:
    """Variable paths, with a count appended to a path that repeats."""
    seen: Counter[str] = Counter()
    names = []
    for path in paths:
        seen[path] += 1
        names.append(path if seen[path] == 1 else f"{path}#{seen[path]}")
    return names


def initial_weights(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """The weights training starts from: a built-in spec's seeded initialisation, or a user
    model's own (its builder's float32 Keras model's trainable weights, in the model's order,
    named by their variable paths)."""
    if not isinstance(spec, UserModel):
        return spec.init_weights(seed)
    variables = _keras_model(spec, tf.float32).trainable_variables
    return dict(zip(_unique_names([v.path for v in variables]), (np.asarray(v.numpy()) for v in variables)))


def keras_forward(spec: UserModel, compute_dtype: tf.DType) -> Forward:
    """A user model's forward: its Keras model, built for `compute_dtype`, called statelessly
    with `weights` (in the order of `initial_weights`) as its trainable variables. It runs in
    training mode, as a training step does. Non-trainable state (e.g. normalisation statistics)
    enters as constants of its initial values, readable on any replica's device; its updates
    are dropped."""
    model = _keras_model(spec, compute_dtype)
    non_trainable = [np.asarray(v.numpy()) for v in model.non_trainable_variables]

    def forward(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        if dtype != compute_dtype:
            raise ValueError(f"the forward of {spec.model_name!r} was built for {compute_dtype.name}, "
                             f"not {dtype.name}")
        outputs, _ = model.stateless_call(list(weights.values()), non_trainable, tf.cast(x, dtype),
                                          training=True)
        return tf.cast(outputs, _logits_dtype(dtype))
    return forward


FORWARDS: dict[type[ModelSpec], Callable[..., Forward]] = {
    Mlp: mlp_forward, ResidualCnn: cnn_forward, TransformerBlock: transformer_forward}


def forwards() -> dict[type[ModelSpec], Callable[..., Forward]]:
    """`FORWARDS` and the forwards of models in modules of their own, which use this module's
    helpers (so they are imported on first use, not when this module loads)."""
    from suites.frameworks.tf.resnet import resnet_forward

    return {**FORWARDS, ResNet50: resnet_forward}


def build_forward(spec: ModelSpec, compute_dtype: tf.DType = tf.float32) -> Forward:
    """The spec's forward. A user model's Keras layers fix their compute dtype when they are
    built, so its forward takes `compute_dtype` only; a built-in forward takes any."""
    if isinstance(spec, UserModel):
        return keras_forward(spec, compute_dtype)
    known = forwards()
    if type(spec) not in known:
        raise Unsupported(f"TF training implements the built-in models ({', '.join(m.name for m in known)}) "
                          f"and user models with a tf builder; {spec.name!r} has no TF forward here")
    return known[type(spec)](spec)


def summed_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Sum of softmax cross-entropy over the batch; divide by the global batch for the mean."""
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def summed_squared_error(outputs: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """Sum over the batch of each sample's mean squared error; divide by the global batch for
    the mean over every element (torch's ``mse_loss``)."""
    errors = tf.square(outputs - tf.reshape(tf.cast(targets, outputs.dtype), tf.shape(outputs)))
    return tf.reduce_sum(errors) / math.prod(outputs.shape[1:])


SUMMED_LOSSES: dict[str, Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = {
    "cross_entropy": summed_cross_entropy, "mse": summed_squared_error}


def summed_loss(spec: ModelSpec) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """The spec's loss summed over the batch (the loops divide by the global batch)."""
    return SUMMED_LOSSES[spec.loss]
