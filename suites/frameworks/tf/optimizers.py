"""The update rules of the TF training loops: the functions torch.optim.SGD (plain, or with
momentum and weight decay), torch.optim.Adam and torch.optim.AdamW apply, written on plain `tf.Variable`s.

The loops own their variables (see `suites.frameworks.tf.trainers`), so they own the optimizer
state too: an optimizer's `slots` for a variable are created where the caller's scope puts them
(beside the variable's copy on its device, or under a `tf.distribute` strategy's scope, which
mirrors them like the variable), and `update` changes one variable and its slots. Under fp16
loss scaling, `finite` false (a non-finite gradient somewhere) leaves the variable and its
slots exactly as they were, as a skipped `GradScaler.step` does.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.workloads.training import ADAM_BETAS, ADAM_EPSILON, OPTIMIZERS

Slots = tuple[tf.Variable, ...]


@dataclass(frozen=True)
class Optimizer(ABC):
    learning_rate: float

    @abstractmethod
    def slots(self, variable: tf.Variable) -> Slots:
        """The state this optimizer keeps for `variable`, created in the caller's scope."""

    @abstractmethod
    def update(self, variable: tf.Variable, grad: tf.Tensor, slots: Slots,
               finite: tf.Tensor | None = None) -> tf.Operation:
        """One step of `variable` (and its slots) along `grad`; none where `finite` is false."""


@dataclass(frozen=True)
class Sgd(Optimizer):
    """variable -= lr * grad; no state."""

    def slots(self, variable: tf.Variable) -> Slots:
        return ()

    def update(self, variable: tf.Variable, grad: tf.Tensor, slots: Slots,
               finite: tf.Tensor | None = None) -> tf.Operation:
        if finite is not None:
            grad = tf.where(finite, grad, tf.zeros_like(grad))
        return variable.assign_sub(tf.constant(self.learning_rate, variable.dtype) * tf.cast(grad, variable.dtype))


@dataclass(frozen=True)
class Momentum(Optimizer):
    """torch.optim.SGD with momentum and weight decay (no dampening, not Nesterov):
    g <- grad + wd * variable; buffer <- momentum * buffer + g (the first step's buffer is g:
    it starts at zero); variable -= lr * buffer. Slot: the buffer."""

    momentum: float = OPTIMIZERS["momentum"].momentum
    weight_decay: float = OPTIMIZERS["momentum"].weight_decay

    def slots(self, variable: tf.Variable) -> Slots:
        return (tf.Variable(tf.zeros(variable.shape, variable.dtype), trainable=False, name="momentum"),)

    def update(self, variable: tf.Variable, grad: tf.Tensor, slots: Slots,
               finite: tf.Tensor | None = None) -> tf.Operation:
        (buffer,) = slots
        dtype = variable.dtype
        old = buffer.read_value()
        new = old * tf.constant(self.momentum, dtype) + tf.cast(grad, dtype) + \
            variable.read_value() * tf.constant(self.weight_decay, dtype)
        delta = new * tf.constant(self.learning_rate, dtype)
        if finite is not None:
            new, delta = tf.where(finite, new, old), tf.where(finite, delta, tf.zeros_like(delta))
        return tf.group(buffer.assign(new), variable.assign_sub(delta))


@dataclass(frozen=True)
class Adam(Optimizer):
    """torch.optim.Adam (no weight decay, no AMSGrad), in its order of operations:
    m <- m + (1 - b1)(g - m); v <- b2 v + (1 - b2) g^2; t <- t + 1;
    variable -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    Slots: the two moments (the variable's shape and dtype) and the step count t (a scalar of
    the variable's dtype, per variable as torch keeps it); bias corrections in the variable's
    dtype too (torch computes them in Python floats, but a TPU has no float64: float32 variables
    keep the whole update in float32). Constants are made in the variable's dtype
    (`tf.constant`, not `tf.cast` of a Python float, which rounds through float32)."""

    beta1: float = ADAM_BETAS[0]
    beta2: float = ADAM_BETAS[1]
    epsilon: float = ADAM_EPSILON
    #: AdamW's decoupled weight decay: variable *= 1 - lr * wd before the Adam step (0: Adam).
    weight_decay: float = 0.0

    def slots(self, variable: tf.Variable) -> Slots:
        def zeros(shape: tf.TensorShape | tuple[int, ...], name: str) -> tf.Variable:
            return tf.Variable(tf.zeros(shape, variable.dtype), trainable=False, name=name)

        return zeros(variable.shape, "adam_m"), zeros(variable.shape, "adam_v"), zeros((), "adam_step")

    def update(self, variable: tf.Variable, grad: tf.Tensor, slots: Slots,
               finite: tf.Tensor | None = None) -> tf.Operation:
        m, v, step = slots
        dtype = variable.dtype
        grad = tf.cast(grad, dtype)
        if finite is not None:
            grad = tf.where(finite, grad, tf.zeros_like(grad))
        old_m, old_v, old_step = m.read_value(), v.read_value(), step.read_value()
        new_m = old_m + (grad - old_m) * tf.constant(1.0 - self.beta1, dtype)
        new_v = old_v * tf.constant(self.beta2, dtype) + grad * grad * tf.constant(1.0 - self.beta2, dtype)
        new_step = old_step + 1
        t, one = tf.cast(new_step, dtype), tf.constant(1.0, dtype)
        step_size = tf.constant(self.learning_rate, dtype) / (one - tf.constant(self.beta1, dtype) ** t)
        correction2_sqrt = tf.sqrt(one - tf.constant(self.beta2, dtype) ** t)
        delta = step_size * (new_m / (tf.sqrt(new_v) / correction2_sqrt + tf.constant(self.epsilon, dtype)))
        if self.weight_decay:
            delta += variable.read_value() * tf.constant(self.learning_rate * self.weight_decay, dtype)
        if finite is not None:
            new_m, new_v = tf.where(finite, new_m, old_m), tf.where(finite, new_v, old_v)
            new_step = tf.where(finite, new_step, old_step)
            delta = tf.where(finite, delta, tf.zeros_like(delta))
        return tf.group(m.assign(new_m), v.assign(new_v), step.assign(new_step), variable.assign_sub(delta))


def optimizer_for(name: str) -> Optimizer:
    """The update rule a train_step case's `optimizer` names, at its learning rate (`OPTIMIZERS`)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r} is not one of {', '.join(OPTIMIZERS)}")
    learning_rate = OPTIMIZERS[name].learning_rate
    if name == "adamw":
        return Adam(learning_rate, weight_decay=OPTIMIZERS[name].weight_decay)
    rules: dict[str, type[Optimizer]] = {"sgd": Sgd, "adam": Adam, "momentum": Momentum}
    return rules[name](learning_rate)
