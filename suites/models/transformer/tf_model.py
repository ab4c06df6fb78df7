"""The transformers of `suites.models.transformer.spec` in TensorFlow (the built-in transformer,
BERT and GPT-2): their layers, each a function of the canonical weights
(`suites.frameworks.tf.models`), LayerNorm statistics in at least float32."""
from __future__ import annotations

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf

from suites.frameworks.tf.models import Layer, Weights, attend, dense, embed, logits_dtype, split_heads
from suites.models.transformer.spec import TransformerBlock

LAYER_NORM_EPSILON = 1e-5


def _layer_norm(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType,
                epsilon: float = LAYER_NORM_EPSILON) -> tf.Tensor:
    """LayerNorm over the last axis with biased variance, statistics in at least float32."""
    stats_dtype = logits_dtype(dtype)
    x32 = tf.cast(x, stats_dtype)
    mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
    normed = (x32 - mean) * tf.math.rsqrt(variance + epsilon)
    out = normed * tf.cast(weights[f"{name}.gamma"], stats_dtype) + tf.cast(weights[f"{name}.beta"], stats_dtype)
    return tf.cast(out, dtype)


def pooled_head(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """The mean over the sequence, then the head, as float32 (float64) logits."""
    return tf.cast(dense(weights, "head", tf.reduce_mean(x, axis=1), dtype), logits_dtype(dtype))


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
