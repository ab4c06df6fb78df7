"""The `towers` layout: TF2 manual multi-tower data parallelism (`TowersTrainer`).

The global batch is split over the towers (`tf.device` scopes); each tower computes the
gradient of its mean loss; the towers' gradients are averaged. Variables either live on a
parameter device, which averages and applies the update (``param_server``), or are replicated
on every tower, where each averaged gradient is summed on one tower (round-robin, to spread the
work) and every tower applies the same update to its own copy (``replicated``: an explicit
reduce + broadcast all-reduce).
"""
from __future__ import annotations

import numpy as np

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.frameworks.tf.mixed import LossScaling  # noqa: E402
from suites.frameworks.tf.trainers import Batch, Trainer, TrainingSetup, _numpy  # noqa: E402


class TowersTrainer(Trainer):
    PLACEMENTS = ("param_server", "replicated")

    def __init__(self, setup: TrainingSetup, devices: list[str], placement: str,
                 parameter_device: str = "/CPU:0") -> None:
        if placement not in self.PLACEMENTS:
            raise ValueError(f"placement must be one of {self.PLACEMENTS}, got {placement!r}")
        super().__init__(setup, replicas=len(devices))
        self.devices, self.placement = devices, placement
        #: Where the loss-scale state lives (and, for param_server, the variables).
        self.state_device = parameter_device if placement == "param_server" else devices[0]
        copy_devices = [parameter_device] if placement == "param_server" else devices
        self.copies = [self._variables_on(device) for device in copy_devices]
        self.copy_slots = []  # the optimizer's state, beside each copy
        for device, copy in zip(copy_devices, self.copies):
            with tf.device(device):
                self.copy_slots.append(self._slots_of(copy))
        with tf.device(self.state_device):
            self.state = self._loss_scale_state()

    def random_batch(self, seed: int) -> Batch:
        batch = []
        for index, device in enumerate(self.devices):
            with tf.device(device):
                batch.append(self._random_local_batch(tf.constant(seed), index))
        return tuple(batch)

    def numpy_batch(self, x: np.ndarray, y: np.ndarray) -> Batch:
        b, batch = self.local_batch, []
        for index, device in enumerate(self.devices):
            with tf.device(device):
                batch.append((tf.identity(tf.constant(x[index * b:(index + 1) * b])),
                              tf.identity(tf.constant(y[index * b:(index + 1) * b]))))
        return tuple(batch)

    def _tower_weights(self, tower: int) -> dict[str, tf.Variable]:
        return self.copies[tower] if self.placement == "replicated" else self.copies[0]

    def _train_step(self, batch: Batch) -> tuple[tf.Tensor, list[tf.Tensor]]:
        scaling, towers = self.setup.scaling, len(self.devices)
        tower_grads, tower_losses = [], []
        for tower, (device, (x, y)) in enumerate(zip(self.devices, batch)):
            weights = self._tower_weights(tower)
            with tf.device(device):
                with tf.GradientTape() as tape:
                    loss = self._local_loss(weights, x, y, self.local_batch)
                    scaled = scaling.scale_loss(loss, self.state)
                tower_grads.append(tape.gradient(scaled, list(weights.values())))
                tower_losses.append(loss)
        if self.placement == "param_server":
            with tf.device(self.state_device):
                grads = scaling.unscale([tf.add_n(list(g)) / towers for g in zip(*tower_grads)], self.state)
                finite = scaling.finite(grads)
                for name, variable, grad in zip(self.names, self.copies[0].values(), grads):
                    self._update(variable, grad, self.copy_slots[0][name], finite)
        else:
            grads, flags = [], []
            for index, per_tower in enumerate(zip(*tower_grads)):
                with tf.device(self.devices[index % towers]):  # reduce: one tower per variable
                    grads += scaling.unscale([tf.add_n(list(per_tower)) / towers], self.state)
                    flags.append(scaling.finite(grads[-1:]))
            finite = None if flags[0] is None else tf.reduce_all(tf.stack(flags))
            for tower, device in enumerate(self.devices):  # broadcast: the same update everywhere
                with tf.device(device):
                    for name, variable, grad in zip(self.names, self.copies[tower].values(), grads):
                        self._update(variable, grad, self.copy_slots[tower][name], finite)
        if self.state is not None:
            with tf.device(self.state_device):
                self.state.assign(LossScaling.next_state(self.state, finite))
        return tf.add_n(tower_losses) / towers, grads

    def _global_loss(self, loss: tf.Tensor) -> float:
        return float(loss)

    def _gradient_copies(self, grads: list[tf.Tensor]) -> list[dict[str, np.ndarray]]:
        return [_numpy(grads, self.names)]

    def weight_copies(self) -> list[dict[str, np.ndarray]]:
        return [_numpy(copy, self.names) for copy in self.copies]
