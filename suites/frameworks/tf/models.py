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
from suites.run.unsupported import Unsupported
from suites.workloads.training import ModelSpec, Mlp, ResidualCnn, TransformerBlock
from suites.workloads.user_model import USER_MODEL_SEED, UserModel

LAYER_NORM_EPSILON = 1e-5

Weights = Mapping[str, tf.Tensor]
Forward = Callable[[Weights, tf.Tensor, tf.DType], tf.Tensor]
#: One layer of a model's sequence (`catalog.layer_forwards`): its input activation -> its output, in
#: the compute dtype (the last layer's logits in float32, as a forward's).
Layer = Callable[[Weights, tf.Tensor, tf.DType], tf.Tensor]


def dense(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType, bias: bool = True) -> tf.Tensor:
    y = tf.matmul(x, tf.cast(weights[f"{name}.kernel"], dtype))
    return y + tf.cast(weights[f"{name}.bias"], dtype) if bias else y


def _conv3x3(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    y = tf.nn.conv2d(x, tf.cast(weights[f"{name}.kernel"], dtype), strides=1, padding="SAME")
    return y + tf.cast(weights[f"{name}.bias"], dtype)


def _layer_norm(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType,
                epsilon: float = LAYER_NORM_EPSILON) -> tf.Tensor:
    """LayerNorm over the last axis with biased variance, statistics in at least float32."""
    stats_dtype = logits_dtype(dtype)
    x32 = tf.cast(x, stats_dtype)
    mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
    normed = (x32 - mean) * tf.math.rsqrt(variance + epsilon)
    out = normed * tf.cast(weights[f"{name}.gamma"], stats_dtype) + tf.cast(weights[f"{name}.beta"], stats_dtype)
    return tf.cast(out, dtype)


def mlp_layers(spec: Mlp) -> list[Layer]:
    """Each dense layer with its ReLU; the last one's logits have none."""
    def hidden(i: int) -> Layer:
        return lambda weights, h, dtype: tf.nn.relu(dense(weights, f"dense{i}", tf.cast(h, dtype), dtype))

    def logits(weights: Weights, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        return tf.cast(dense(weights, f"dense{spec.depth}", tf.cast(h, dtype), dtype), logits_dtype(dtype))
    return [*(hidden(i) for i in range(spec.depth)), logits]


def cnn_layers(spec: ResidualCnn) -> list[Layer]:
    """The stem, each residual block, the pooled head."""
    def stem(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        return tf.nn.relu(_conv3x3(weights, "stem", tf.cast(x, dtype), dtype))

    def block(b: int) -> Layer:
        def residual(weights: Weights, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
            h = tf.cast(h, dtype)
            r = tf.nn.relu(_conv3x3(weights, f"block{b}.conv1", h, dtype))
            return tf.nn.relu(h + _conv3x3(weights, f"block{b}.conv2", r, dtype))
        return residual

    def head(weights: Weights, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        pooled = tf.reduce_mean(tf.cast(h, dtype), axis=[1, 2])
        return tf.cast(dense(weights, "head", pooled, dtype), logits_dtype(dtype))
    return [stem, *(block(b) for b in range(spec.blocks)), head]


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


def pooled_head(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """The mean over the sequence, then the head, as float32 (float64) logits."""
    return tf.cast(dense(weights, "head", tf.reduce_mean(x, axis=1), dtype), logits_dtype(dtype))


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


def vocabulary_logits(x: tf.Tensor, table: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """Logits at every position from a (vocab, d) table (a tied LM head), float32 (float64)."""
    return tf.cast(tf.matmul(x, tf.cast(table, dtype), transpose_b=True), logits_dtype(dtype))


def transformer_layers(spec: TransformerBlock) -> list[Layer]:
    """The built-in transformer, BERT and GPT-2, as each block (the first also embeds the tokens
    and adds the segment and positions and the input norm) and the head (after the final norm:
    GPT-2's tied LM head, BERT's MLM head, or the pooled 10-class head): the spec's class
    variables choose the mask, the norm placement, biases, positions and norms (as
    `TorchTransformerBlock`)."""
    d_head = spec.d_model // spec.heads
    eps = spec.layer_norm_eps
    shapes = spec.parameter_shapes()

    def attention(weights: Weights, prefix: str, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        q, k, v = (split_heads(dense(weights, f"{prefix}attn.{p}", h, dtype, bias=spec.qkv_bias), spec.seq, d_head)
                   for p in "qkv")
        return dense(weights, f"{prefix}attn.o", attend(q, k, v, spec.causal, dtype), dtype)

    def feed_forward(weights: Weights, prefix: str, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        h = tf.nn.gelu(dense(weights, f"{prefix}ffn.in", h, dtype), approximate=spec.gelu_tanh)
        return dense(weights, f"{prefix}ffn.out", h, dtype)

    def block(i: int) -> Layer:
        prefix = f"block{i}."

        def apply(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
            x = embed(weights, "tok", x, dtype) if i == 0 and "tok.embedding" in shapes else tf.cast(x, dtype)
            if i == 0 and "segment.embedding" in shapes:  # every token in segment A
                x = x + tf.cast(weights["segment.embedding"][0], dtype)
            if i == 0 and spec.learned_positions:  # what `layer_names` puts with the first block
                x = x + tf.cast(weights["pos.embedding"], dtype)
            if i == 0 and spec.input_norm:
                x = _layer_norm(weights, "input_norm", x, dtype, eps)
            if spec.norm_first:
                x = x + attention(weights, prefix, _layer_norm(weights, f"{prefix}ln1", x, dtype, eps), dtype)
                return x + feed_forward(weights, prefix, _layer_norm(weights, f"{prefix}ln2", x, dtype, eps), dtype)
            x = _layer_norm(weights, f"{prefix}ln1", x + attention(weights, prefix, x, dtype), dtype, eps)
            return _layer_norm(weights, f"{prefix}ln2", x + feed_forward(weights, prefix, x, dtype), dtype, eps)
        return apply

    def head(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        x = tf.cast(x, dtype)
        if spec.final_norm:
            x = _layer_norm(weights, "final_norm", x, dtype, eps)
        if "mlm.bias" in shapes:  # BERT's MLM head: LN(GELU(dense(x))), the tied decoder, its bias
            x = tf.nn.gelu(dense(weights, "mlm.dense", x, dtype), approximate=spec.gelu_tanh)
            x = _layer_norm(weights, "mlm.norm", x, dtype, eps)
            bias = tf.cast(weights["mlm.bias"], logits_dtype(dtype))
            return vocabulary_logits(x, weights["tok.embedding"], dtype) + bias
        if "tok.embedding" in shapes:  # GPT-2's LM head: the token embedding
            return vocabulary_logits(x, weights["tok.embedding"], dtype)
        return pooled_head(weights, x, dtype)
    return [*(block(i) for i in range(spec.layers)), head]


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
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)) / labels.shape[-1]


SUMMED_LOSSES: dict[str, Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = {
    "cross_entropy": summed_cross_entropy, "token_cross_entropy": summed_token_cross_entropy,
    "mse": summed_squared_error}


def summed_loss(spec: ModelSpec) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """The spec's loss summed over the batch (the loops divide by the global batch)."""
    return SUMMED_LOSSES[spec.loss]
