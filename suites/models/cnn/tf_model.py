"""The residual CNN (`suites.models.cnn.spec.ResidualCnn`) in TensorFlow: its layers, each a
function of the canonical weights (`suites.frameworks.tf.models`), NHWC, 'SAME' padding."""
from __future__ import annotations

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf

from suites.frameworks.tf.models import Layer, Weights, dense, logits_dtype
from suites.models.cnn.spec import ResidualCnn


def _conv3x3(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    y = tf.nn.conv2d(x, tf.cast(weights[f"{name}.kernel"], dtype), strides=1, padding="SAME")
    return y + tf.cast(weights[f"{name}.bias"], dtype)


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
