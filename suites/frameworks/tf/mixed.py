"""Mixed precision for the TF training loops: compute dtypes and a manual dynamic loss scale.

The loops train plain `tf.Variable`s (see `suites.frameworks.tf.models`), so instead of wrapping a Keras optimizer
in `keras.mixed_precision.LossScaleOptimizer` they apply the same algorithm by hand, with the
same constants: the loss is multiplied by the scale (initially 2**15); the (all-reduced)
gradients are divided by it; if any is not finite the update is skipped and the scale halved,
otherwise after 2000 finite steps in a row the scale doubles (the update rules of
`suites.frameworks.tf.optimizers` take the finite flag). fp16 needs it; bf16 has float32's
exponent range and uses no scaling, like Keras' ``mixed_bfloat16``.

The scale's state is one float32 vector ``[scale, finite steps in a row]`` so a strategy can
update it with a single `strategy.extended.update` alongside the weights.
"""
from __future__ import annotations

from dataclasses import dataclass

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf

from suites.cases.vocabulary import Precision

INITIAL_SCALE = 2.0 ** 15
GROWTH_INTERVAL = 2000
FACTOR = 2.0
#: The Keras dtype policy that computes in a dtype: variables float32 (float64 for the float64
#: reference), layers cast them and their inputs to the compute dtype.
KERAS_POLICIES = {tf.float32: "float32", tf.float64: "float64",
                  tf.float16: "mixed_float16", tf.bfloat16: "mixed_bfloat16"}


@dataclass(frozen=True)
class LossScaling:
    """Whether a precision scales its loss; the pure functions of the dynamic algorithm."""

    enabled: bool

    @classmethod
    def for_precision(cls, precision: Precision) -> "LossScaling":
        return cls(enabled=precision is Precision.FP16)

    @staticmethod
    def initial_state() -> tf.Tensor:
        return tf.constant([INITIAL_SCALE, 0.0], tf.float32)

    def scale_loss(self, loss: tf.Tensor, state: tf.Tensor | None) -> tf.Tensor:
        return loss * state[0] if self.enabled else loss

    def unscale(self, grads: list[tf.Tensor], state: tf.Tensor | None) -> list[tf.Tensor]:
        if not self.enabled:
            return grads
        inverse = 1.0 / state[0]
        return [g * tf.cast(inverse, g.dtype) for g in grads]

    def finite(self, grads: list[tf.Tensor]) -> tf.Tensor | None:
        """Whether every gradient is finite; None where the loss is not scaled (nothing to skip)."""
        if not self.enabled:
            return None
        return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])

    @staticmethod
    def next_state(state: tf.Tensor, finite: tf.Tensor) -> tf.Tensor:
        scale, good_steps = state[0], state[1] + 1.0
        grow = good_steps >= GROWTH_INTERVAL
        finite_state = tf.stack([tf.where(grow, scale * FACTOR, scale), tf.where(grow, 0.0, good_steps)])
        shrunk_state = tf.stack([scale / FACTOR, tf.constant(0.0)])
        return tf.where(finite, finite_state, shrunk_state)


def keras_dtype_policy(compute_dtype: tf.DType) -> str:
    """The name of the Keras dtype policy whose layers compute in `compute_dtype`."""
    return KERAS_POLICIES[compute_dtype]
