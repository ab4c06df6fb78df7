"""TF `model_parallel`: the classic TF multi-device model parallelism, in one process.

The model's layers are split into contiguous groups as every `pipeline` splits them (balanced
by parameter count, `suites.strategies.stages`); group k's variables and ops are placed on
device k with `tf.device` — GPUs for real, logical CPU devices when emulated (set before TF
initialises, so a case runs in a fresh process) — and the activations flow from device to
device, forward and back. The whole batch goes through at once: one device busy at a time.
It is `pipeline` with one micro-batch (`suites.strategies.tf.model_parallel.staged.StagedTrainer`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from suites.cases.vocabulary import Strategy
from suites.measure.launch import Launch
from suites.strategies.base import deep_enough, too_few_gpus_reason
from suites.strategies.requirements import requirement
from suites.strategies.stages import layers_reason, per_device_state, stage_split
from suites.strategies.tf.base import TfHooks, TfStrategy
from suites.strategies.exchange_model import Collective, ExchangeModel
from suites.workloads.training import Mlp

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import tensorflow as tf

    from suites.frameworks.tf.trainers import Trainer, TrainingSetup
    from suites.hardware.devices import DeviceInfo


@requirement("two devices or more")
def two_devices(job: "Job", device: "DeviceInfo") -> str | None:
    if job.case.n_devices < 2:
        return f"{job.case.strategy} over one device runs the whole model there (strategy 'single' times that)"
    return None


@requirement("a visible GPU per device, or logical GPUs split from fewer")
def gpu_per_device(job: "Job", device: "DeviceInfo") -> str | None:
    return too_few_gpus_reason(job, device, str(job.case.strategy), job.strategy.rules.shares_gpus)


@requirement("the model's layers split into a group per device")
def layers_split(job: "Job", device: "DeviceInfo") -> str | None:
    return layers_reason(job, job.n_devices, f"{job.case.strategy} over {job.n_devices} devices")


class ModelParallelHooks(TfHooks):
    """The staged mechanism of `model_parallel` and `pipeline`
    (`suites.strategies.tf.model_parallel.staged.StagedTrainer`), at the plugin's micro-batch count."""

    def trainer(self, setup: "TrainingSetup", job: "Job", params: Mapping[str, Any],
                strategy: "tf.distribute.Strategy | None") -> "Trainer":
        from suites.frameworks.tf.distribute import replica_devices
        from suites.strategies.tf.model_parallel.staged import StagedTrainer

        return StagedTrainer(setup, replica_devices(job), job.strategy.microbatches(job))

    def describe(self, job: "Job", params: Mapping[str, Any]) -> str:
        split = stage_split(job.workload.model, job.n_devices)
        return f"{job.strategy.strategy} ({split}; {job.strategy.microbatches(job)} micro-batch(es))"


class ModelParallel(TfStrategy):
    strategy = Strategy.MODEL_PARALLEL
    exchange = ExchangeModel((Collective("send_recv", "stage_activations", "compute", per_step=2),),
                             serial=True, source="layers placed on devices in turn: one device busy at a time")
    # The process holds every device of the case (one stage each), which TF must be told about
    # before it initialises; logical GPUs split from one where there are fewer.
    rules = TfStrategy.rules.but(launch=Launch.ISOLATED, replicas_in_process=True, shares_gpus=True)
    requirements = (two_devices, gpu_per_device, layers_split)
    hooks = ModelParallelHooks()

    def sized_for(self, params: Mapping[str, object], n: int) -> dict[str, object]:
        """An mlp with a layer group per device (the pipeline's stages alike)."""
        return deep_enough(params, n, Mlp().depth)

    def microbatches(self, job: "Job") -> int:
        return 1

    def state_bytes_per_device(self, job: "Job", parameters: int, optimizer_states: int) -> dict[str, int]:
        """The device holding the largest group: its layers' parameters, gradients and
        optimizer states (the largest is the one that must fit)."""
        return per_device_state(job.workload.model, job.n_devices, 1, parameters, optimizer_states)


PLUGIN = ModelParallel()
