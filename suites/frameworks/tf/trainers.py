"""TF training loops: one model's variables laid out over devices, and its compiled step.

The interface every layout implements (`Trainer`), what it trains (`TrainingSetup`), and the
layouts several strategies (or the numerics checks) share:
- `SingleDeviceTrainer`: variables and compute on one device; also the float64 / float32
  single-device full-batch reference of the numerics checks.
- `StrategyTrainer`: a `tf.distribute` strategy (Mirrored, MultiWorkerMirrored, TPU) with a
  custom loop: `strategy.run` of a replica step that all-reduces its gradients with the
  strategy's cross-device ops and updates the mirrored variables.
A layout of one strategy lives with that strategy's plugin (`suites.strategies.tf.towers.trainer`,
`suites.strategies.tf.model_parallel.staged`, `suites.strategies.tf.parameter_server.trainer`).

Under XLA (`TrainingSetup.xla`) a layout whose variables and compute share one device compiles
its whole step with `tf.function(jit_compile=True)`; a `tf.distribute` layout compiles each
replica's forward and backward (`_local_gradients`, on tensors read from the variables), and its
all-reduce and update run outside XLA, which cannot reach the variables' copies on other
devices.

Every step is forward + backward + update (`suites.frameworks.tf.optimizers`: SGD, or Adam,
whose slots live beside each copy of the variables). Per-replica losses are sums over the local
batch divided by the global batch (towers: local means, averaged), so every layout computes the
gradient of the mean loss over the global batch.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from suites.frameworks.tf import backend  # first: TF's environment before TF loads
import tensorflow as tf

from suites.frameworks.tf.catalog import build_forward
from suites.frameworks.tf.distribute import Lockstep, synchronize_devices
from suites.frameworks.tf.mixed import LossScaling
from suites.frameworks.tf.models import summed_loss
from suites.frameworks.tf.optimizers import Slots, optimizer_for
from suites.workloads.training import ModelSpec

if TYPE_CHECKING:
    from suites.measure.memory_probes import MemoryProbe

Batch = Any  # what a trainer's step takes: tensors on its device(s), in its own layout


@dataclass(frozen=True)
class TrainingSetup:
    """What is trained, in which precision: shared by every layout."""

    spec: ModelSpec
    weights: Mapping[str, np.ndarray]
    global_batch: int
    compute_dtype: tf.DType
    scaling: LossScaling
    variable_dtype: tf.DType = tf.float32
    #: The update rule (`suites.workloads.training.OPTIMIZERS`), at its own learning rate.
    optimizer: str = "sgd"
    #: Compile with XLA (`jit_compile=True`): the case's `compile` is `xla`.
    xla: bool = False
    #: Equal parts of each batch the model is applied to one by one, so that batch statistics
    #: are each part's own (`TrainStep.statistics_groups`): what the numerics references of a
    #: data-parallel case with "local" batch norm compute on one device.
    statistics_groups: int = 1


class Trainer(ABC):
    #: The dynamic loss scale's state (fp16 only), created by each layout where it belongs.
    state: tf.Variable | None
    #: Multi-worker trainers replace it with their workers' lockstep.
    lockstep: Lockstep = Lockstep()
    #: Under XLA the whole step is one XLA computation (variables on the step's one device);
    #: False: only `_local_gradients` is.
    compiles_whole_step: bool = True

    def __init__(self, setup: TrainingSetup, replicas: int) -> None:
        self.setup = setup
        self.local_batch = setup.global_batch // replicas
        self.forward = build_forward(setup.spec, setup.compute_dtype)
        self.loss_function = summed_loss(setup.spec)
        self.target_shape = setup.spec.target_shape
        self.names = list(setup.weights)
        self.optimizer = optimizer_for(setup.optimizer)
        self.compile_anew()
        # Two functions, traced separately: the checks' tracing stays out of the first timed step.
        backend.quiet_expected_retracing()

        def checked_step(batch: Batch) -> tuple[Any, Any]:
            return self._train_step(batch)
        self._checked_step = self._function(checked_step)

    def _function(self, fn: Any) -> Any:
        return tf.function(fn, jit_compile=self.setup.xla and self.compiles_whole_step or None)

    def compile_anew(self) -> None:
        """New step functions: the next step traces (and under XLA compiles) again."""
        self._step = self._function(lambda batch: self._train_step(batch)[0])
        self._gradients = tf.function(self._local_gradients, jit_compile=True) if self.setup.xla else None

    def compilations(self) -> int:
        """Traces of the timed step's functions so far (each XLA trace is one compile)."""
        functions = [f for f in (self._step, self._gradients) if f is not None]
        return sum(f.experimental_get_tracing_count() for f in functions)

    def _local_gradients(self, weights: Mapping[str, tf.Tensor], x: tf.Tensor, y: tf.Tensor,
                         state: tf.Tensor | None) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """The local loss and the gradients of its scaled form with respect to `weights`."""
        with tf.GradientTape() as tape:
            tape.watch(list(weights.values()))
            loss = self._local_loss(weights, x, y, self.setup.global_batch)
            scaled = self.setup.scaling.scale_loss(loss, state)
        return loss, tape.gradient(scaled, list(weights.values()))

    def _variables_on(self, device: str | None,
                      weights: Mapping[str, np.ndarray] | None = None) -> dict[str, tf.Variable]:
        """Variables of `weights` (default: all of the model's) on `device`."""
        with tf.device(device):
            return {name: tf.Variable(value.astype(self.setup.variable_dtype.as_numpy_dtype), name=name)
                    for name, value in (self.setup.weights if weights is None else weights).items()}

    def _slots_of(self, variables: Mapping[str, tf.Variable]) -> dict[str, Slots]:
        """The optimizer's state for one copy of the variables, created in the caller's scope
        (a device, or a strategy's scope: beside the copy it updates)."""
        return {name: self.optimizer.slots(variable) for name, variable in variables.items()}

    def _loss_scale_state(self) -> tf.Variable | None:
        if not self.setup.scaling.enabled:
            return None
        return tf.Variable(LossScaling.initial_state(), trainable=False, name="loss_scale")

    def _local_loss(self, weights: Mapping[str, tf.Tensor], x: tf.Tensor, y: tf.Tensor,
                    divisor: int) -> tf.Tensor:
        groups = self.setup.statistics_groups
        parts = zip(tf.split(x, groups), tf.split(y, groups)) if groups > 1 else [(x, y)]
        summed = tf.add_n([self.loss_function(self.forward(weights, part_x, self.setup.compute_dtype), part_y)
                           for part_x, part_y in parts])
        return tf.cast(summed, self.setup.variable_dtype) / divisor

    def _random_local_batch(self, seed: tf.Tensor, replica: tf.Tensor | int) -> tuple[tf.Tensor, tf.Tensor]:
        """Random inputs and targets, drawn where the enclosing device scope puts them."""
        seeds = tf.stack([tf.cast(seed, tf.int32), tf.cast(replica, tf.int32)])
        shape, vocabulary = (self.local_batch, *self.setup.spec.input_shape), self.setup.spec.input_vocabulary
        x = (tf.random.stateless_uniform(shape, seeds, 0, vocabulary, dtype=tf.int32) if vocabulary
             else tf.random.stateless_normal(shape, seeds))  # token ids, or float inputs
        return x, self._random_targets(seeds + 1)

    def _random_targets(self, seeds: tf.Tensor) -> tf.Tensor:
        """Standard normal targets of the spec's target shape (mse), or class labels."""
        if self.setup.spec.loss == "mse":
            return tf.random.stateless_normal((self.local_batch, *self.target_shape), seeds)
        return tf.random.stateless_uniform((self.local_batch, *self.target_shape), seeds, 0,
                                           self.setup.spec.num_classes, dtype=tf.int32)

    def _update(self, variable: tf.Variable, grad: tf.Tensor, slots: Slots,
                finite: tf.Tensor | None = None) -> tf.Operation:
        return self.optimizer.update(variable, grad, slots, finite)

    # --- the interface --------------------------------------------------------------------
    @abstractmethod
    def random_batch(self, seed: int) -> Batch:
        """A random batch generated on the device(s), in the layout `step` takes."""

    @abstractmethod
    def numpy_batch(self, x: np.ndarray, y: np.ndarray) -> Batch:
        """The global batch (x, y) split over the replicas, in the layout `step` takes."""

    @abstractmethod
    def _train_step(self, batch: Batch) -> tuple[Any, Any]:
        """One step; returns (loss in any form, the gradients each copy applied)."""

    @abstractmethod
    def _global_loss(self, loss: Any) -> float:
        """The mean loss over the global batch, from what `_train_step` returned."""

    @abstractmethod
    def _gradient_copies(self, grads: Any) -> list[dict[str, np.ndarray]]:
        """The applied gradients, one mapping per copy of the variables in this process."""

    @abstractmethod
    def weight_copies(self) -> list[dict[str, np.ndarray]]:
        """The current weights, one mapping per copy of the variables in this process."""

    def step(self, batch: Batch) -> Any:
        """Enqueue one training step (forward + backward + update); does not wait for it."""
        return self._step(batch)

    def checked_step(self, batch: Batch) -> tuple[float, list[dict[str, np.ndarray]]]:
        """One step, waited for: the global mean loss before the update and the applied gradients."""
        loss, grads = self._checked_step(batch)
        return self._global_loss(loss), self._gradient_copies(grads)

    def loss_scale(self) -> float | None:
        """The current dynamic loss scale (it drops when a step is skipped), or None."""
        return None if self.state is None else float(self.state.numpy()[0])

    def synchronize(self) -> None:
        backend.synchronize()

    def barrier(self) -> None:
        self.lockstep.barrier()  # timed blocks end when every worker has finished

    def gather(self, value: float) -> tuple[float, ...]:
        return self.lockstep.gather(value)

    def agree(self, value: float) -> float:
        return self.lockstep.agree(value)

    def memory_probe(self) -> "MemoryProbe | None":
        """The layout's own memory probe (a cluster's: every task's); None: the runnable's."""
        return None

    def machines(self) -> list[dict[str, Any]] | None:
        """The provenance of every process of a multi-process case, on rank 0; None: one process."""
        return self.lockstep.machines()


def _numpy(tensors: Mapping[str, tf.Tensor] | list[tf.Tensor], names: list[str]) -> dict[str, np.ndarray]:
    values = tensors.values() if isinstance(tensors, Mapping) else tensors
    return {name: backend.to_numpy(t) for name, t in zip(names, values)}


class SingleDeviceTrainer(Trainer):
    def __init__(self, setup: TrainingSetup, device: str) -> None:
        super().__init__(setup, replicas=1)
        self.device = device
        self.variables = self._variables_on(device)
        with tf.device(device):
            self.slots = self._slots_of(self.variables)
            self.state = self._loss_scale_state()

    def random_batch(self, seed: int) -> Batch:
        with tf.device(self.device):
            return self._random_local_batch(tf.constant(seed), 0)

    def numpy_batch(self, x: np.ndarray, y: np.ndarray) -> Batch:
        with tf.device(self.device):
            return tf.identity(tf.constant(x)), tf.identity(tf.constant(y))

    def _train_step(self, batch: Batch) -> tuple[tf.Tensor, list[tf.Tensor]]:
        x, y = batch
        scaling, variables = self.setup.scaling, list(self.variables.values())
        with tf.device(self.device):
            with tf.GradientTape() as tape:
                loss = self._local_loss(self.variables, x, y, self.setup.global_batch)
                scaled = scaling.scale_loss(loss, self.state)
            grads = scaling.unscale(tape.gradient(scaled, variables), self.state)
            finite = scaling.finite(grads)
            for name, variable, grad in zip(self.names, variables, grads):
                self._update(variable, grad, self.slots[name], finite)
            if self.state is not None:
                self.state.assign(LossScaling.next_state(self.state, finite))
        return loss, grads

    def loss(self, batch: Batch) -> float:
        """The mean loss of `batch`, without a step."""
        x, y = batch
        with tf.device(self.device):
            return float(self._local_loss(self.variables, x, y, self.setup.global_batch))

    def _global_loss(self, loss: tf.Tensor) -> float:
        return float(loss)

    def _gradient_copies(self, grads: list[tf.Tensor]) -> list[dict[str, np.ndarray]]:
        return [_numpy(grads, self.names)]

    def weight_copies(self) -> list[dict[str, np.ndarray]]:
        return [_numpy(self.variables, self.names)]


class StrategyTrainer(Trainer):
    compiles_whole_step = False

    def __init__(self, setup: TrainingSetup, strategy: tf.distribute.Strategy,
                 lockstep: Lockstep = Lockstep(), read_back_to_sync: bool = False) -> None:
        self.strategy = strategy
        super().__init__(setup, replicas=strategy.num_replicas_in_sync)
        with strategy.scope():  # mirrored: a copy of each (and of its slots) on every replica's device
            self.variables = self._variables_on(None)
            self.slots = self._slots_of(self.variables)
            self.state = self._loss_scale_state()
        self.lockstep = lockstep
        self.read_back_to_sync = read_back_to_sync
        self._last: Any = None
        self._draw = tf.function(lambda seed: strategy.run(self._random_replica_batch, args=(seed,)))

    def _random_replica_batch(self, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return self._random_local_batch(seed, replica)

    def random_batch(self, seed: int) -> Batch:
        return self._draw(tf.constant(seed))

    def numpy_batch(self, x: np.ndarray, y: np.ndarray) -> Batch:
        b = self.local_batch

        def local(context: tf.distribute.experimental.ValueContext) -> tuple[tf.Tensor, tf.Tensor]:
            start = context.replica_id_in_sync_group * b
            return tf.constant(x[start:start + b]), tf.constant(y[start:start + b])

        return self.strategy.experimental_distribute_values_from_function(local)

    def _replica_step(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        scaling, variables = self.setup.scaling, list(self.variables.values())
        if self._gradients is not None:  # XLA: on the values, not the variables (other devices' copies)
            state = None if self.state is None else self.state.read_value()
            loss, local_grads = self._gradients({name: v.read_value() for name, v in self.variables.items()},
                                                x, y, state)
        else:
            with tf.GradientTape() as tape:
                loss = self._local_loss(self.variables, x, y, self.setup.global_batch)
                scaled = scaling.scale_loss(loss, self.state)
            local_grads = tape.gradient(scaled, variables)
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local_grads)
        grads = scaling.unscale(grads, self.state)
        finite = scaling.finite(grads)
        extra = () if finite is None else (finite,)
        for name, variable, grad in zip(self.names, variables, grads):
            # Each device's copy of the variable is updated with that device's copies of its slots.
            self.strategy.extended.update(variable, self._update, args=(grad, self.slots[name], *extra))
        if self.state is not None:
            self.strategy.extended.update(self.state, lambda state, ok: state.assign(
                LossScaling.next_state(state, ok)), args=(finite,))
        return loss, grads

    def _train_step(self, batch: Batch) -> tuple[Any, Any]:
        return self.strategy.run(self._replica_step, args=batch)

    def step(self, batch: Batch) -> Any:
        self._last = self._step(batch)
        return self._last

    def _global_loss(self, loss: Any) -> float:
        return float(self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None))

    def _gradient_copies(self, grads: Any) -> list[dict[str, np.ndarray]]:
        per_replica = [self.strategy.experimental_local_results(g) for g in grads]
        return [_numpy([g[r] for g in per_replica], self.names) for r in range(len(per_replica[0]))]

    def weight_copies(self) -> list[dict[str, np.ndarray]]:
        components = [self.strategy.experimental_local_results(v) for v in self.variables.values()]
        return [_numpy([c[r] for c in components], self.names) for r in range(len(components[0]))]

    def synchronize(self) -> None:
        if self.read_back_to_sync:  # TPU: reading a step's result waits for it
            if self._last is not None:
                for value in self.strategy.experimental_local_results(self._last):
                    value.numpy()
        else:
            synchronize_devices(self.strategy.extended.worker_devices)
