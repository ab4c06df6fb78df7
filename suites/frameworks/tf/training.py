"""TensorFlow training step: one model, one strategy, one precision.

The case's strategy plugin (`suites.strategies.tf`), through its mechanism
(`suites.strategies.tf.base.TfHooks`), picks the layout of `suites.frameworks.tf.trainers` (one
device, manual towers, or a `tf.distribute` strategy with a custom loop), the `tf.distribute`
strategy and how processes meet. Synthetic batches are drawn
on the device(s) with seeded stateless RNG and rotated. Where processes meet (``multiworker``),
every timed block ends with a barrier (all workers, barrier to barrier) and every timing
decision is rank 0's (`agree`).

Checks: fp32/tf32 compare the first-step gradient every copy of the variables applied with the
float64 single-device full-batch gradient (same weights, same global batch); fp16/bf16 compare
the loss over the first steps with the fp32 single-device trajectory of the same optimizer.
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from suites.frameworks.tf import backend  # first: TF's environment before TF loads
import tensorflow as tf

from suites.records.check import (LOSS_TRAJECTORY_STEPS, Check, gradients_against_reference,
                     loss_trajectory_check)
from suites.cases.vocabulary import Compile, DeviceKind, Precision
from suites.frameworks.tf import memory_probe as tf_memory
from suites.frameworks.tf.distribute import (configure_runtime, gpu_ordinals, host_cpu, local_gpus, local_tpus,
                                             placement_detail, replica_devices)
from suites.frameworks.tf.mixed import LossScaling
from suites.frameworks.tf.models import initial_weights
from suites.frameworks.tf.trainers import SingleDeviceTrainer, Trainer, TrainingSetup
from suites.measure import faults
from suites.measure.memory_probes import MemoryProbe
from suites.measure.runnable import COORDINATED_BLOCK_S, Runnable
from suites.workloads.kernels import batch_rotation_count
from suites.workloads.training import TrainStep

WEIGHTS_SEED = 0
DATA_SEED = 1
#: Check batches are `spec.make_batch(global batch, CHECK_SEED + step)` (as in the torch training step).
CHECK_SEED = 100
MIXED = (Precision.FP16, Precision.BF16)
#: What a model's batch norm runs, by its `batchnorm` mode (`suites.models.resnet.tf_model`).
BATCHNORM_DETAILS = {
    "local": "local: each replica's own statistics (tf.nn.fused_batch_norm; the float64 reference: "
             "keras.ops.moments)",
    "sync": "sync: keras.ops.moments(synchronized=True), an all-reduce over the replicas "
            "(as keras.layers.BatchNormalization(synchronized=True))"}


#: How far copies of a variable may lie apart after the check's steps, relative to the largest
#: weight (at least 1): about 8 float32 ulps, rounding of identical updates rewritten differently
#: per device (`TfTrainStep._copies_diverged`), far below any copy that missed an update.
COPY_RTOL = 1e-6


class TfTrainStep(Runnable):
    workload: TrainStep
    unsupported_errors = backend.UNSUPPORTED_ERRORS

    def setup(self) -> None:
        self.memory_baseline = tf_memory.Baseline.now()  # before anything of the case exists
        self.plugin = self.job.strategy
        self.hooks = self.plugin.hooks
        configure_runtime(self.job)
        self.details["device_placement"] = placement_detail(self.job)
        self.details.update(backend.cudnn_details(self.case))
        backend.set_matmul_precision(self.case.precision)
        self.spec = faults.step_model(self.workload.model)
        if self.spec.batch_statistics is not None:
            self.details["batchnorm"] = BATCHNORM_DETAILS[self.spec.batch_statistics]
        # First: a multi-worker strategy configures collective ops, which must come before any TF
        # op (building a user model's Keras model for its initial weights runs some).
        strategy = self.strategy = self.hooks.distribute(self.job)
        #: The numerics references run in float64 / fp32 on this process's host CPU, whatever
        #: the case's device.
        self.reference_device = host_cpu(strategy)
        self.memory_baseline = self.memory_baseline.with_gpus(local_gpus(self.job)).with_tpus(local_tpus(self.job))
        if self.plugin.rules.coordinated:
            self.min_block_s = COORDINATED_BLOCK_S  # processes meet once per timed block
        self.weights = initial_weights(self.spec, WEIGHTS_SEED)
        self.trainer = self.hooks.trainer(replace(self._training_setup(
            backend.DTYPES[self.case.precision], LossScaling.for_precision(self.case.precision)),
            xla=self.case.compile is Compile.XLA), self.job, self.p, strategy)
        machines = self.trainer.machines()
        if machines:
            self.details["machines"] = machines  # every process's provenance (rank 0 stores it)
        sample_bytes = int(np.prod(self.spec.input_shape)) * 4
        count = batch_rotation_count(sample_bytes * self.workload.per_device_batch)
        self.batches = [self.trainer.random_batch(DATA_SEED + i) for i in range(count)]
        self._order = itertools.cycle(range(count))

    def _training_setup(self, compute_dtype: tf.DType, scaling: LossScaling,
                        variable_dtype: tf.DType = tf.float32, statistics_groups: int = 1,
                        global_batch: int | None = None) -> TrainingSetup:
        return TrainingSetup(self.spec, self.weights, global_batch or self.workload.global_batch,
                             compute_dtype, scaling, variable_dtype, optimizer=self.workload.optimizer,
                             statistics_groups=statistics_groups)

    def step(self) -> None:
        self.trainer.step(self.batches[next(self._order)])

    def synchronize(self) -> None:
        self.trainer.synchronize()

    def compilations(self) -> int | None:
        return self.trainer.compilations() if self.case.compile is Compile.XLA else None

    def compile_anew(self) -> None:
        self.trainer.compile_anew()

    def barrier(self) -> None:
        self.trainer.barrier()

    def gather(self, value: float) -> tuple[float, ...]:
        return self.trainer.gather(value)

    def agree(self, value: float) -> float:
        return self.trainer.agree(value)

    def gpu_ordinals(self) -> tuple[int, ...]:
        return gpu_ordinals(self.job)

    def memory_probe(self) -> MemoryProbe | None:
        """Allocator peaks of the GPUs or TPU cores holding replicas (a TPU's unknown where TF
        cannot read it, never the host's); on the CPU, this process's resident set.
        None in a GPU case run from a process without a GPU (a parameter-server chief): its
        tasks' host memory is not the case's GPU memory, and the workers' GPUs are theirs."""
        if self.case.device is DeviceKind.GPU and not local_gpus(self.job):
            self.details["memory_not_measured"] = (
                "the chief that runs the case sees no GPU; the workers' GPU memory is not read from it")
            return None
        return (self.trainer.memory_probe()
                or tf_memory.memory_probe(local_tpus(self.job) or replica_devices(self.job), self.memory_baseline,
                                          self.details))

    # --- correctness ------------------------------------------------------------------------
    def check(self) -> Check:
        """The check runs a trainer of its own, built by the case's strategy as the timed one is,
        at the check's small global batch (`TrainStep.check_params`): its cost does not grow
        with the global batch, and it compiles nothing of the timed step, whose first timed
        step (XLA: its compile) is measured as torch's is. The trainer is dropped afterwards."""
        work = self.job.check_job().workload
        checker = self.check_trainer(work)
        try:
            if self.case.precision in MIXED:
                check = self._loss_trajectory_check(checker, work)
            elif getattr(checker, "asynchronous", False):
                check = self._worker_updates_check(checker, work)
            else:
                check = self._gradient_check(checker, work)
            copies = checker.weight_copies()
            return self._copies_diverged(copies, work) or replace(
                check, detail=f"{check.detail}; {len(copies)} copies of the variables here, identical "
                              f"after the steps{faults.detail()}")
        finally:
            del checker

    def check_trainer(self, work: TrainStep) -> Trainer:
        """A trainer like the timed one (the case's strategy, precision and compiler) at the
        check workload's global batch."""
        setup = self._training_setup(backend.DTYPES[self.case.precision],
                                     LossScaling.for_precision(self.case.precision),
                                     global_batch=work.global_batch)
        return self.hooks.trainer(replace(setup, xla=self.case.compile is Compile.XLA), self.job.check_job(), work.p,
                                  self.strategy)

    def _reference(self, dtype: tf.DType, work: TrainStep) -> SingleDeviceTrainer:
        """One device, the whole check batch, batch statistics over the parts the case's
        replicas compute them over. Built from the case's model, whatever an injected fault built."""
        setup = replace(self._training_setup(dtype, LossScaling(False), dtype, self.job.check_job().statistics_groups(),
                                             work.global_batch), spec=work.model)
        return SingleDeviceTrainer(setup, self.reference_device)

    def _describe(self, work: TrainStep) -> str:
        return (f"{self.hooks.describe(self.job, self.p)} on {self.case.n_devices} {self.case.device} device(s), "
                f"check batch {work.global_batch} of global batch {self.workload.global_batch}"
                f"{work.statistics_detail(self.job.check_job().statistics_groups())}")

    def _gradient_check(self, checker: Trainer, work: TrainStep) -> Check:
        """Every copy's applied first-step gradient against the float64 full-batch gradient."""
        x, y = self.spec.make_batch(work.global_batch, CHECK_SEED)
        _, copies = checker.checked_step(checker.numpy_batch(x, y))
        reference_trainer = self._reference(tf.float64, work)
        _, (reference,) = reference_trainer.checked_step(reference_trainer.numpy_batch(x, y))
        detail = f"{self._describe(work)} vs float64 single-device, {len(copies)} applied gradient(s)"
        checks = [gradients_against_reference(faults.observed_gradients(copy, self.case.n_devices),
                                              reference, self.case.precision, detail)
                  for copy in copies]
        return max(checks, key=lambda check: check.value)

    def _worker_updates_check(self, checker: Trainer, work: TrainStep) -> Check:
        """Asynchronous training (a parameter server): one update per worker, each on its own
        rows of the check batch; every update's gradient against the float64 gradient of its
        own rows' mean loss at the weights that update read. The update that runs first reads
        the initial weights (with one worker the updates run in turn, and the first is
        single-device training's first step)."""
        x, y = self.spec.make_batch(work.global_batch, CHECK_SEED)
        updates = checker.worker_updates(checker.numpy_batch(x, y))
        checks, fresh = [], 0
        for update in updates:
            read = faults.claimed_weights(update.weights, self.weights)
            fresh += all(np.array_equal(read[name], self.weights[name]) for name in self.weights)
            setup = replace(self._training_setup(tf.float64, LossScaling(False), tf.float64),
                            weights=read, global_batch=update.rows.stop - update.rows.start)
            reference = SingleDeviceTrainer(setup, self.reference_device)
            _, (gradient,) = reference.checked_step(reference.numpy_batch(x[update.rows], y[update.rows]))
            checks.append(gradients_against_reference(update.gradients, gradient, self.case.precision,
                                                      ""))
        worst = max(checks, key=lambda check: check.value)
        detail = (f"{self._describe(work)}: each of {len(updates)} update(s) vs the float64 gradient of its "
                  f"own batch of {checker.local_batch} at the weights it read "
                  f"({fresh} read the initial weights; {worst.detail})")
        if not fresh:  # the update that ran first must have read them
            return replace(worst, passed=False, detail=f"no update read the initial weights; {detail}")
        return replace(worst, detail=detail)

    def _loss_trajectory_check(self, checker: Trainer, work: TrainStep) -> Check:
        """Losses of the first steps against the fp32 single-device trajectory on the same
        batches, with the same optimizer (`_reference` shares the case's `TrainingSetup`); a
        step that loss scaling skipped (non-finite gradients) is skipped there too."""
        batches = [self.spec.make_batch(work.global_batch, CHECK_SEED + i)
                   for i in range(LOSS_TRAJECTORY_STEPS)]
        losses, applied = [], []
        for x, y in batches:
            scale = checker.loss_scale()
            losses.append(checker.checked_step(checker.numpy_batch(x, y))[0])
            applied.append(scale is None or checker.loss_scale() >= scale)
        reference_trainer = self._reference(tf.float32, work)
        reference = [reference_trainer.checked_step(reference_trainer.numpy_batch(x, y))[0] if update
                     else reference_trainer.loss(reference_trainer.numpy_batch(x, y))
                     for (x, y), update in zip(batches, applied)]
        skipped = applied.count(False)
        check = loss_trajectory_check(losses, reference, self.case.precision,
                                      f"{self._describe(work)}, {self.workload.optimizer}; {skipped} step(s) "
                                      "skipped by loss scaling")
        if not any(applied):
            return Check(False, check.metric, float("inf"), check.tolerance,
                         "loss scaling skipped every step: no update was checked")
        return check

    def _copies_diverged(self, copies: list[dict[str, np.ndarray]], work: TrainStep) -> Check | None:
        """A failed check if the copies of the variables in this process differ after the check's
        steps by more than rounding (`COPY_RTOL` of the largest weight), else None. Every copy
        applies the same update, but not always bit for bit: Grappler's arithmetic optimizer may
        rewrite each tower's identical update ops differently (seen with fp16's loss-scale guard
        on towers: 1.5e-8 apart, none with the optimizer off); a broken broadcast or a copy left
        out of an update differs by far more."""
        if len(copies) < 2:
            return None
        difference = max(float(np.max(np.abs(copy[name] - copies[0][name]))) for copy in copies[1:] for name in copy)
        scale = max(float(np.max(np.abs(values))) for values in copies[0].values())
        tolerance = COPY_RTOL * max(1.0, scale)
        if difference <= tolerance:
            return None
        return Check(False, "copy_max_abs_diff", difference, tolerance,
                     f"{self._describe(work)}: the {len(copies)} copies of the variables diverged")
