"""ResNet-50 v1.5 in TensorFlow: a function of the canonical weights (see
`suites.frameworks.tf.models`), the same function as `suites.models.resnet.torch_model`.

Convolutions pad k // 2 on every side explicitly (TF's "SAME" would pad a stride-2 layer on
the bottom and right only, a different function from torch's), and the max pool pads with -inf,
as torch's does. Local batch norm is TF's fused kernel (`fused_batch_norm`, training mode: the
batch's own statistics, statistics in float32), as Keras' BatchNormalization runs it; under
"sync", and in a float64 reference (the fused kernel has no float64), it is Keras':
`keras.ops.moments`, with `synchronized=True` under "sync" — inside a `tf.distribute` replica
context an all-reduce of each layer's sums, sums of
squares and counts over the replicas, exactly what `keras.layers.BatchNormalization(
synchronized=True)` runs — then scale and shift. Statistics are computed in float32 (float64 for
a float64 reference), as Keras does for float16 and bfloat16 inputs.
"""
from __future__ import annotations

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import keras
import tensorflow as tf

from suites.frameworks.tf.models import Forward, Weights, dense, logits_dtype
from suites.models.resnet.spec import BATCH_NORM_EPSILON, Conv, ResNet50, parameter_prefixes


def _conv(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType, kernel: int, stride: int) -> tf.Tensor:
    pad = kernel // 2
    padding = [[0, 0], [pad, pad], [pad, pad], [0, 0]] if pad else "VALID"
    return tf.nn.conv2d(x, tf.cast(weights[f"{name}.kernel"], dtype), strides=stride, padding=padding)


def _batch_norm(weights: Weights, name: str, x: tf.Tensor, dtype: tf.DType, synchronized: bool) -> tf.Tensor:
    if not synchronized and dtype != tf.float64:  # TF's fused kernel (cuDNN's on GPUs); it has no float64
        out, _, _ = tf.compat.v1.nn.fused_batch_norm(
            tf.cast(x, dtype), tf.cast(weights[f"{name}.gamma"], tf.float32),
            tf.cast(weights[f"{name}.beta"], tf.float32), epsilon=BATCH_NORM_EPSILON, is_training=True)
        return out
    stats_dtype = tf.float64 if dtype == tf.float64 else tf.float32
    wide = tf.cast(x, stats_dtype)
    mean, variance = keras.ops.moments(wide, axes=[0, 1, 2], synchronized=synchronized)
    out = tf.nn.batch_normalization(wide, mean, variance, tf.cast(weights[f"{name}.beta"], stats_dtype),
                                    tf.cast(weights[f"{name}.gamma"], stats_dtype), BATCH_NORM_EPSILON)
    return tf.cast(out, dtype)


def _max_pool(x: tf.Tensor) -> tf.Tensor:
    """3x3, stride 2, one pixel of -inf padding on every side."""
    padded = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], constant_values=float("-inf"))
    return tf.nn.max_pool2d(padded, 3, 2, "VALID")


def resnet_forward(spec: ResNet50) -> Forward:
    convs: list[Conv] = list(spec.convolutions())
    synchronized = spec.batchnorm == "sync"

    def conv_bn(weights: Weights, conv: Conv, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        conv_name, bn_name = parameter_prefixes(conv.name)
        y = _conv(weights, conv_name, x, dtype, conv.kernel, conv.stride)
        return _batch_norm(weights, bn_name, y, dtype, synchronized)

    def forward(weights: Weights, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        stem, *body = convs
        h = _max_pool(tf.nn.relu(conv_bn(weights, stem, tf.cast(x, dtype), dtype)))
        index = 0
        while index < len(body):  # a block: .1, .2, .3 and, first in a stage, .down
            first, middle, expand = body[index:index + 3]
            has_down = index + 3 < len(body) and body[index + 3].name.endswith(".down")
            out = tf.nn.relu(conv_bn(weights, first, h, dtype))
            out = tf.nn.relu(conv_bn(weights, middle, out, dtype))
            out = conv_bn(weights, expand, out, dtype)
            shortcut = conv_bn(weights, body[index + 3], h, dtype) if has_down else h
            h = tf.nn.relu(out + shortcut)
            index += 4 if has_down else 3
        pooled = tf.reduce_mean(h, axis=[1, 2])
        return tf.cast(dense(weights, "head", pooled, dtype), logits_dtype(dtype))
    return forward
