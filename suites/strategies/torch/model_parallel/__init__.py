"""torch `model_parallel`: the multi-GPU tutorials' model parallelism, in one process.

The model's layers are split into contiguous groups as `pipeline` splits them (balanced by
parameter count), group i placed on `cuda:i`; the forward pass runs them in turn, moving the
activation from GPU to GPU, and the backward pass comes back the same way. One GPU works at a
time: this is a pipeline with one micro-batch and no process per stage. It runs in an isolated
worker (as `dataparallel` does): a copy stuck between GPUs ends with the worker at its deadline.

On a CPU there are no devices to place groups on; `pipeline` with `microbatches = 1` (one gloo
rank per stage) is the emulated equivalent.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from suites.cases.vocabulary import Strategy
from suites.measure.launch import Launch
from suites.strategies.requirements import requirement
from suites.strategies.stages import layer_sizes, layers_reason, per_device_state, split_layers
from suites.strategies.base import deep_enough
from suites.strategies.torch.base import TorchHooks, TorchStrategy, a_gpu_per_device, on_cuda_gpus
from suites.strategies.torch.pipeline import stage_layers
from suites.strategies.exchange_model import Collective, ExchangeModel
from suites.workloads.training import Mlp

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import torch
    from torch import nn

    from suites.hardware.devices import DeviceInfo

MODEL_PARALLEL_ON_CPU = ("model_parallel places layer groups on cuda:0..n-1 in one process; a "
                         "CPU-only machine has no such devices. Its emulated equivalent is strategy "
                         "'pipeline' with microbatches = 1: one gloo rank per stage, the batch passed "
                         "from stage to stage, one stage busy at a time")


def devices_of(job: "Job") -> list["torch.device"]:
    """The GPUs the case's layer groups go to: the first `n_devices` visible ones."""
    import torch

    return [torch.device("cuda", index) for index in range(job.n_devices)]


on_gpus = on_cuda_gpus("the case is on GPUs: layer groups go to cuda:0..n-1 (on a CPU, strategy pipeline)",
                       MODEL_PARALLEL_ON_CPU, "model_parallel places layer groups on CUDA devices")


@requirement("two GPUs or more")
def two_gpus(job: "Job", device: "DeviceInfo") -> str | None:
    if job.case.n_devices < 2:
        return "model_parallel over one GPU runs the whole model there (strategy 'single' times that)"
    return None


enough_gpus = a_gpu_per_device("model_parallel")


@requirement("the model's layers split into a group per GPU")
def layers_split(job: "Job", device: "DeviceInfo") -> str | None:
    return layers_reason(job, job.n_devices, f"model_parallel over {job.n_devices} GPUs")


class ModelParallelHooks(TorchHooks):
    """Model parallelism's mechanism: the model's layer groups placed on the case's GPUs, all of
    which a step waits for."""

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "nn.Module":
        """Group i of the model's layers moved to cuda:i (the model's own parameters move, so
        the optimizer and the gradient check see them where they are); the output returns to
        `device`, where the runnable's targets are. Mixed precision: the runnable's autocast
        covers every CUDA device of this thread."""
        from suites.frameworks.torch.models import LayerGroup
        from suites.strategies.torch.model_parallel.placed import PlacedLayerGroups

        layers = stage_layers(model)
        groups = split_layers(layer_sizes(model.spec), job.n_devices)
        return PlacedLayerGroups([LayerGroup(model, [layers[j] for j in group]) for group in groups],
                                 devices_of(job), device)

    def devices_in_use(self, job: "Job", device: "torch.device") -> list["torch.device"]:
        """Every GPU of the case: a step has finished when the last group's has."""
        return devices_of(job)


class ModelParallel(TorchStrategy):
    strategy = Strategy.MODEL_PARALLEL
    exchange = ExchangeModel((Collective("send_recv", "stage_activations", "compute", per_step=2),),
                             serial=True, source="layers placed on devices in turn: one device busy at a time")
    rules = TorchStrategy.rules.but(launch=Launch.ISOLATED)
    requirements = (on_gpus, two_gpus, enough_gpus, layers_split)
    hooks = ModelParallelHooks()

    def sized_for(self, params: Mapping[str, object], n: int) -> dict[str, object]:
        """An mlp with a layer group per device."""
        return deep_enough(params, n, Mlp().depth)

    def emulated(self, job: "Job") -> bool:
        """Never: it runs on real GPUs only (on a CPU it is unavailable, not emulated)."""
        return False

    def state_bytes_per_device(self, job: "Job", parameters: int, optimizer_states: int) -> dict[str, int]:
        """The GPU holding the largest group: its layers' parameters, gradients and optimizer
        states (the largest is the one that must fit)."""
        return per_device_state(job.workload.model, job.n_devices, 1, parameters,
                                optimizer_states)


PLUGIN = ModelParallel()
