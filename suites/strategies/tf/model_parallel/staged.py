"""TF model and pipeline parallelism in one process: `StagedTrainer`.

The model's layers (`suites.frameworks.tf.catalog.layer_forwards`, one per
`suites.strategies.stages.layer_names`) are cut into contiguous groups balanced by parameter
count (`split_layers`, the split torch's `pipeline` and `model_parallel` use); group k's
variables, optimizer slots and compute live on device k (`tf.device`: logical CPU devices when
emulated, GPUs for real), and each activation is copied from a stage's device to the next's.

One step is one `tf.function`. The global batch (inputs on the first stage's device, targets on
the last's) is cut into `microbatches` micro-batches. Each micro-batch runs forward through the
stages, each stage under its own `GradientTape`; its loss (summed, divided by the global batch,
so that the micro-batches' losses add up to the global mean) is taken on the last stage; then
backward, stage by stage in reverse, each stage's tape giving the gradient of its input (sent
back to the previous stage) and of its variables, under the stage's device. Each stage sums its
micro-batches' gradients on its device and updates its variables there.

No schedule is written down: the function is a dataflow graph, and TF's executor starts every
op when its inputs are ready, on its device, with inter-op parallelism. So stage k+1 can work on
micro-batch i-1 while stage k works on micro-batch i (and a micro-batch's backward can start as
soon as its forward has reached the loss). With one micro-batch it is plain model parallelism:
one stage busy at a time.

fp16: the loss scale's state lives on the last stage (where the loss is scaled); every stage
unscales its own gradients, and the update is skipped on every stage when any stage's
gradients are not finite.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf

from suites.frameworks.tf.catalog import layer_forwards
from suites.frameworks.tf.mixed import LossScaling
from suites.frameworks.tf.models import Layer
from suites.frameworks.tf.optimizers import Slots
from suites.frameworks.tf.trainers import Batch, Trainer, TrainingSetup, _numpy
from suites.strategies.stages import layer_names, layer_sizes, split_layers


@dataclass
class Stage:
    """One device's share of the model: its layers, its variables and their slots."""

    device: str
    layers: list[Layer]
    variables: dict[str, tf.Variable]
    slots: dict[str, Slots]

    def forward(self, x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        for layer in self.layers:
            x = layer(self.variables, x, dtype)
        return x


class StagedTrainer(Trainer):
    """Layer groups on `devices` (one stage each), the batch cut into `microbatches`."""

    def __init__(self, setup: TrainingSetup, devices: list[str], microbatches: int = 1) -> None:
        layers = layer_forwards(setup.spec)  # first: raises Unsupported for a model without layers
        if setup.global_batch % microbatches:
            raise ValueError(f"microbatches = {microbatches} does not divide the global batch of "
                             f"{setup.global_batch}")
        super().__init__(setup, replicas=1)
        self.devices, self.microbatches = list(devices), microbatches
        names = layer_names(setup.spec)
        self.stages: list[Stage] = []
        for device, group in zip(self.devices, split_layers(layer_sizes(setup.spec), len(self.devices))):
            prefixes = [prefix for j in group for prefix in names[j]]
            weights = {name: value for name, value in setup.weights.items() if name.split(".")[0] in prefixes}
            variables = self._variables_on(device, weights)
            with tf.device(device):
                slots = self._slots_of(variables)
            self.stages.append(Stage(device, [layers[j] for j in group], variables, slots))
        with tf.device(self.devices[-1]):
            self.state = self._loss_scale_state()

    # --- batches: inputs on the first stage, targets on the last ---------------------------
    def random_batch(self, seed: int) -> Batch:
        with tf.device(self.devices[0]):
            x, y = self._random_local_batch(tf.constant(seed), 0)
        with tf.device(self.devices[-1]):
            return x, tf.identity(y)

    def numpy_batch(self, x: np.ndarray, y: np.ndarray) -> Batch:
        with tf.device(self.devices[0]):
            inputs = tf.identity(tf.constant(x))
        with tf.device(self.devices[-1]):
            return inputs, tf.identity(tf.constant(y))

    # --- the step -----------------------------------------------------------------------------
    def _train_step(self, batch: Batch) -> tuple[tf.Tensor, list[tf.Tensor]]:
        x, y = batch
        scaling, dtype, m = self.setup.scaling, self.setup.compute_dtype, self.microbatches
        with tf.device(self.devices[0]):
            xs = tf.split(x, m)
        with tf.device(self.devices[-1]):
            ys = tf.split(y, m)
        losses, stage_grads = [], [[] for _ in self.stages]
        for x_i, y_i in zip(xs, ys):
            tapes, activations = [], [x_i]
            for index, stage in enumerate(self.stages):
                with tf.device(stage.device), tf.GradientTape() as tape:
                    if index:
                        tape.watch(activations[-1])
                    out = stage.forward(activations[-1], dtype)
                    if index == len(self.stages) - 1:
                        loss = tf.cast(self.loss_function(out, y_i), self.setup.variable_dtype)
                        out = scaling.scale_loss(loss / self.setup.global_batch, self.state)
                        losses.append(loss / self.setup.global_batch)
                tapes.append(tape)
                activations.append(out)
            upstream = None
            for index in reversed(range(len(self.stages))):
                stage = self.stages[index]
                with tf.device(stage.device):
                    sources = list(stage.variables.values()) + ([activations[index]] if index else [])
                    grads = tapes[index].gradient(activations[index + 1], sources, output_gradients=upstream)
                stage_grads[index].append(grads[:len(stage.variables)])
                upstream = grads[len(stage.variables)] if index else None
        return tf.add_n(losses), self._update_stages(stage_grads)

    def _update_stages(self, stage_grads: list[list[list[tf.Tensor]]]) -> list[tf.Tensor]:
        """Each stage's gradients summed over the micro-batches and unscaled on its device, the
        update applied there (skipped everywhere if any stage's are not finite); returns the
        gradients in `self.names` order."""
        scaling, summed, flags = self.setup.scaling, [], []
        for stage, per_microbatch in zip(self.stages, stage_grads):
            with tf.device(stage.device):
                grads = scaling.unscale([tf.add_n(list(g)) for g in zip(*per_microbatch)], self.state)
                flags.append(scaling.finite(grads))
            summed.append(grads)
        finite = None
        if flags[0] is not None:
            with tf.device(self.devices[-1]):
                finite = tf.reduce_all(tf.stack(flags))
        by_name: dict[str, tf.Tensor] = {}
        for stage, grads in zip(self.stages, summed):
            with tf.device(stage.device):
                for (name, variable), grad in zip(stage.variables.items(), grads):
                    self._update(variable, grad, stage.slots[name], finite)
                    by_name[name] = grad
        if self.state is not None:
            with tf.device(self.devices[-1]):
                self.state.assign(LossScaling.next_state(self.state, finite))
        return [by_name[name] for name in self.names]

    def _global_loss(self, loss: tf.Tensor) -> float:
        return float(loss)

    def _gradient_copies(self, grads: list[tf.Tensor]) -> list[dict[str, np.ndarray]]:
        return [_numpy(grads, self.names)]

    def weight_copies(self) -> list[dict[str, np.ndarray]]:
        """One copy: each variable lives on its stage's device only."""
        variables = {name: v for stage in self.stages for name, v in stage.variables.items()}
        return [_numpy([variables[name] for name in self.names], self.names)]
