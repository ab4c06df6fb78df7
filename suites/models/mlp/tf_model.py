"""The multilayer perceptron (`suites.models.mlp.spec.Mlp`) in TensorFlow: its layers, each a
function of the canonical weights (`suites.frameworks.tf.models`)."""
from __future__ import annotations

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf

from suites.frameworks.tf.models import Layer, Weights, dense, logits_dtype
from suites.models.mlp.spec import Mlp


def mlp_layers(spec: Mlp) -> list[Layer]:
    """Each dense layer with its ReLU; the last one's logits have none."""
    def hidden(i: int) -> Layer:
        return lambda weights, h, dtype: tf.nn.relu(dense(weights, f"dense{i}", tf.cast(h, dtype), dtype))

    def logits(weights: Weights, h: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        return tf.cast(dense(weights, f"dense{spec.depth}", tf.cast(h, dtype), dtype), logits_dtype(dtype))
    return [*(hidden(i) for i in range(spec.depth)), logits]
