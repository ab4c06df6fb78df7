"""TensorFlow forward passes of the neutral `ModelSpec`s, as plain functions of their weights:
what every model's TF forward shares (`dense`, `attend`, `embed`, the losses) and how a model's
forward is found (`build_forward`, `layer_forwards`). Each built-in model's own layers live in
its folder of `suites.models` (``tf_model.py``), found through its spec
(`suites.frameworks.model_folders.model_implementation`).

A model here is a function ``logits = forward(weights, x, compute_dtype)`` over a mapping of
parameter name -> tensor (plain `tf.Variable`s, mirrored variables or constants), in the
canonical layout of `suites.workloads.model_spec` (dense (in, out), conv HWIO, NHWC), which is
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
from suites.measure.unsupported import Unsupported
from suites.workloads.model_spec import ModelSpec
from suites.workloads.user_model import USER_MODEL_SEED, UserModel



Weights = Mapping[str, tf.Tensor]
Forward = Callable[[Weights, tf.Tensor, tf.DType], tf.Tensor]
#: One layer of a model's sequence (`layer_forwards`): its input activation -> its output, in
#: the compute dtype (the last layer's logits in float32, as a forward's).
Layer = Callable[[Weights, tf.Tensor, tf.DType], tf.Tensor]


def dense(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType, bias: bool = True) -> tf.Tensor:
    y = tf.matmul(x, tf.cast(weights[f"{name}.kernel"], dtype))
    return y + tf.cast(weights[f"{name}.bias"], dtype) if bias else y


def split_heads(t: tf.Tensor, seq: int, d_head: int) -> tf.Tensor:
    """(batch, seq, heads x d_head) -> (batch, heads, seq, d_head)."""
    return tf.transpose(tf.reshape(t, (-1, seq, t.shape[-1] // d_head, d_head)), (0, 2, 1, 3))


def attend(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, causal: bool, dtype: tf.DType) -> tf.Tensor:
    """softmax(Q K^T / sqrt(d_head) + mask) V over (batch, heads, seq, d_head), the softmax in at
    least float32; `causal`: position i attends to positions <= i. Back to (batch, seq, features)."""
    seq, d_head = q.shape[2], q.shape[3]
    scores = tf.cast(tf.matmul(q, k, transpose_b=True) / tf.cast(math.sqrt(d_head), dtype), logits_dtype(dtype))
    if causal:
        future = tf.linalg.band_part(tf.ones((seq, seq), tf.bool), 0, -1) & ~tf.eye(seq, dtype=tf.bool)
        scores = tf.where(future, tf.constant(-math.inf, scores.dtype), scores)
    probs = tf.cast(tf.nn.softmax(scores, axis=-1), dtype)
    attended = tf.transpose(tf.matmul(probs, v), (0, 2, 1, 3))
    return tf.reshape(attended, (-1, seq, attended.shape[2] * d_head))


@tf.custom_gradient
def _gather_rows(table: tf.Tensor, ids: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], tuple[tf.Tensor, None]]]:
    """table[ids], with a dense gradient (the rows' gradients summed into a table of zeros, as
    torch's embedding backward gives), not `tf.gather`'s IndexedSlices, which the training
    loops' loss scaling, all-reduces and updates do not take."""
    def gradient(upstream: tf.Tensor) -> tuple[tf.Tensor, None]:
        rows = tf.reshape(upstream, (-1, table.shape[-1]))
        return tf.math.unsorted_segment_sum(rows, tf.reshape(ids, (-1,)), table.shape[0]), None
    return tf.gather(table, ids), gradient


def embed(weights: Weights, name: str, ids: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """The rows of the embedding table ``<name>.embedding`` for token `ids`, in `dtype`."""
    table = tf.convert_to_tensor(weights[f"{name}.embedding"])
    return tf.cast(_gather_rows(table, ids), dtype)


def sequential(layers: list[Layer]) -> Forward:
    """The forward that applies `layers` in turn."""
    def forward(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        for layer in layers:
            x = layer(weights, x, dtype)
        return x
    return forward


def logits_dtype(dtype: tf.DType) -> tf.DType:
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
        model = spec.build(Framework.TF)
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
        return tf.cast(outputs, logits_dtype(dtype))
    return forward


def summed_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Sum of softmax cross-entropy over the batch; divide by the global batch for the mean."""
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def summed_squared_error(outputs: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
    """Sum over the batch of each sample's mean squared error; divide by the global batch for
    the mean over every element (torch's ``mse_loss``)."""
    errors = tf.square(outputs - tf.reshape(tf.cast(targets, outputs.dtype), tf.shape(outputs)))
    return tf.reduce_sum(errors) / math.prod(outputs.shape[1:])


def summed_token_cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Sum over the batch of each sample's mean softmax cross-entropy over its tokens ((batch,
    seq, vocab) logits, (batch, seq) targets); divided by the global batch, the mean over every
    token (torch's cross-entropy of the flattened tokens)."""
    return (tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            / labels.shape[-1])


SUMMED_LOSSES: dict[str, Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = {
    "cross_entropy": summed_cross_entropy, "token_cross_entropy": summed_token_cross_entropy,
    "mse": summed_squared_error}


def summed_loss(spec: ModelSpec) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """The spec's loss summed over the batch (the loops divide by the global batch)."""
    return SUMMED_LOSSES[spec.loss]
