"""TF training under `tf.distribute.ParameterServerStrategy`, driven by a `ClusterCoordinator`.

The variables (and the optimizer's slots) live on the parameter servers, round-robin when
there are several. The chief — the coordinator, the process that runs the case — schedules
closures; each runs on whichever worker is free: it takes the next batch of that worker's
dataset, reads the current variables from the parameter servers, computes the gradient of
its own batch's mean loss and applies its update to the parameter servers at once.

Training is asynchronous: no gradient is averaged and no worker waits for another, so a worker
may compute its gradient on weights other workers have updated meanwhile. One timed step
schedules one closure per worker (the global batch: `workers` × the per-worker batch), and
`synchronize` waits for every scheduled closure (`ClusterCoordinator.join`): the throughput is
the steps completed by all workers per second.

What the numerics check compares (`ParameterServerTrainer.worker_updates`): every update's
gradient against the float64 gradient of that update's own batch *at the weights it read*,
which the closure returns beside its gradient. With one worker the closures run one after
another, so its first update reads the initial weights and equals single-device training's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.frameworks.tf.cluster import Task, cluster_tasks  # noqa: E402
from suites.frameworks.tf.mixed import LossScaling  # noqa: E402
from suites.frameworks.tf.trainers import Batch, Trainer, TrainingSetup, _numpy  # noqa: E402
from suites.measure.memory_probes import MemoryProbe  # noqa: E402
from suites.strategies.tf.parameter_server.serving import (ClusterMemoryProbe, own_provenance,  # noqa: E402
                                                           resident_bytes, task_provenance)


@dataclass(frozen=True)
class WorkerUpdate:
    """One closure's update: the rows of the check batch it trained on, the weights it read
    from the parameter servers, the gradient it applied, its batch's mean loss."""

    rows: slice
    weights: dict[str, np.ndarray]
    gradients: dict[str, np.ndarray]
    loss: float


class ParameterServerTrainer(Trainer):
    #: Each update is computed from the weights its worker read, not a shared step's.
    asynchronous = True

    def __init__(self, setup: TrainingSetup, strategy: tf.distribute.Strategy, workers: int) -> None:
        self.strategy, self.workers = strategy, workers
        super().__init__(setup, replicas=workers)
        self.tasks, _ = cluster_tasks()
        self._baselines = resident_bytes(self.tasks)  # before the variables exist
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():  # on the parameter servers
            self.variables = self._variables_on(None)
            self.slots = self._slots_of(self.variables)
            self.state = self._loss_scale_state()
        self._seeds: list[int] = []
        self._iterator: Any = None
        self._timed = tf.function(self._next_batch_step)
        self._checked = tf.function(lambda x, y: strategy.run(self._update_from, args=(x, y)))

    # --- one worker's update ------------------------------------------------------------------
    def _update_from(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor], list[tf.Tensor]]:
        """Read the weights once, compute the gradient of this batch's mean loss there, apply
        it; returns (loss, weights read, gradient)."""
        scaling = self.setup.scaling
        read = {name: variable.read_value() for name, variable in self.variables.items()}
        with tf.GradientTape() as tape:
            tape.watch(list(read.values()))
            loss = self._local_loss(read, x, y, self.local_batch)
            scaled = scaling.scale_loss(loss, self.state)
        grads = scaling.unscale(tape.gradient(scaled, list(read.values())), self.state)
        finite = scaling.finite(grads)
        for name, grad in zip(self.names, grads):
            self._update(self.variables[name], grad, self.slots[name], finite)
        if self.state is not None:
            self.state.assign(LossScaling.next_state(self.state, finite))
        return loss, list(read.values()), grads

    def _next_batch_step(self, iterator: Any) -> tf.Tensor:
        x, y = next(iterator)
        return self.strategy.run(lambda x, y: self._update_from(x, y)[0], args=(x, y))

    # --- the Trainer interface ----------------------------------------------------------------
    def random_batch(self, seed: int) -> Batch:
        """The seed: each worker draws its rotated batches from these seeds in its own dataset
        (`coordinator.create_per_worker_dataset`), on its own device."""
        self._seeds.append(seed)
        return seed

    def _worker_dataset(self, context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        seeds = tf.constant(self._seeds or [0], tf.int32)
        return (tf.data.Dataset.from_tensor_slices(seeds)
                .map(lambda seed: self._random_local_batch(seed, 0)).cache().repeat())

    def _device_batches(self) -> Any:
        """Each worker's rotated batches, prefetched to its device (the strategy's input
        pipeline; `InputOptions.experimental_prefetch_to_device` is on by default), so a step
        finds its batch there, as every other strategy's does, instead of copying it from the
        host first."""
        return self.strategy.distribute_datasets_from_function(self._worker_dataset)

    def step(self, batch: Batch) -> Any:
        """Schedule one update per worker (a global batch); returns before they run."""
        if self._iterator is None:
            self._iterator = iter(self.coordinator.create_per_worker_dataset(tf.function(self._device_batches)))
        for _ in range(self.workers):
            self.coordinator.schedule(self._timed, args=(self._iterator,))

    def synchronize(self) -> None:
        self.coordinator.join()

    def numpy_batch(self, x: np.ndarray, y: np.ndarray) -> Batch:
        return x, y

    def worker_updates(self, batch: Batch) -> list[WorkerUpdate]:
        """Schedule one update per worker, each on its own `local_batch` rows of `batch`, and
        return what each read and applied, in schedule order."""
        x, y = batch
        b = self.local_batch
        rows = [slice(index * b, (index + 1) * b) for index in range(self.workers)]
        scheduled = [self.coordinator.schedule(self._checked, args=(tf.constant(x[r]), tf.constant(y[r])))
                     for r in rows]
        self.coordinator.join()
        updates = []
        for r, remote in zip(rows, scheduled):
            loss, weights, grads = remote.fetch()
            updates.append(WorkerUpdate(r, _numpy(weights, self.names), _numpy(grads, self.names),
                                        float(loss)))
        return updates

    def checked_step(self, batch: Batch) -> tuple[float, list[dict[str, np.ndarray]]]:
        """One update per worker, waited for: the mean of their losses and their gradients."""
        updates = self.worker_updates(batch)
        return float(np.mean([u.loss for u in updates])), [u.gradients for u in updates]

    def _train_step(self, batch: Batch) -> tuple[Any, Any]:
        raise NotImplementedError("a parameter-server step is scheduled per worker (`step`)")

    def _global_loss(self, loss: Any) -> float:
        return float(loss)

    def _gradient_copies(self, grads: Any) -> list[dict[str, np.ndarray]]:
        return [_numpy(grads, self.names)]

    def weight_copies(self) -> list[dict[str, np.ndarray]]:
        """The one copy, on the parameter servers."""
        return [_numpy(self.variables, self.names)]

    # --- the cluster --------------------------------------------------------------------------
    def memory_probe(self) -> MemoryProbe:
        return ClusterMemoryProbe(self.tasks, self._baselines)

    def machines(self) -> list[dict[str, Any]]:
        chief: Task = self.tasks[0]
        return [own_provenance(chief), *task_provenance(self.tasks[1:])]
