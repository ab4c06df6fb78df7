"""torch `pipeline`: `torch.distributed.pipelining`, one rank process per stage.

The model's layers (`TorchModel.stage_layers`: the MLP's dense layers, the CNN's stem, blocks
and head, the transformer's sublayers and head) are split into contiguous groups, one per
stage, balanced by parameter count (`split_layers`). Every rank feeds the whole global batch
(`data_shard`): the schedule cuts it into `microbatches` micro-batches; stage 0 takes the
inputs, the last stage the targets, and computes the loss. One step is the schedule's `step`
(forward and backward of every micro-batch, gradients averaged over them) followed by the
optimizer on this rank's parameters; the layers of the other stages are left on the meta
device (shapes, no storage).

Schedules (`schedule`): `gpipe` (ScheduleGPipe: every forward, then every backward), `1f1b`
(Schedule1F1B: one forward, one backward in the steady state; needs microbatches >= stages) and
`interleaved_1f1b` (ScheduleInterleaved1F1B: two stages per rank, placed looped: rank r holds
stages r and r + p). `microbatches = 1` is the naive inter-layer model parallelism of the
classic multi-GPU tutorials: the batch goes through the stages in turn, one device busy at a
time (`model_parallel` is that pattern in one process on GPUs).

The theoretical bubble, the share of the step a stage idles waiting for its neighbours, is
(p - 1) / (v*m + p - 1) for p devices, m micro-batches and v stages per device (GPipe and
1F1B: v = 1; interleaved: v = 2, with equal-time stages and free communication). It is stored
beside the measured step as the metric `pipeline_bubble` (`bubble_fraction`).

The numerics check gathers every stage's first-step gradients to every rank (canonical layout)
and compares them with the float64 single-device full-batch gradient; under fp16/bf16 the loss
trajectory, whose loss lives on the last stage, is broadcast from it (`global_loss`). fp16's
loss scaling skips a step on every stage when any stage's gradients overflowed.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
from typing import TYPE_CHECKING, Any, Mapping, cast

from suites.cases.vocabulary import Compile, DeviceKind, Strategy
from suites.strategies.options import option
from suites.strategies.requirements import requirement
from suites.strategies.stages import (MICROBATCHES_HELP, bubble, layer_names, layer_sizes, layers_reason,
                                      microbatches_divide_batch, microbatches_of, per_device_state, rank_stages,
                                      split_layers)
from suites.measure import faults
from suites.strategies.base import deep_enough, devices_on_this_node
from suites.strategies.torch.base import RankHooks, RankProcesses
from suites.strategies.exchange_model import Collective, ExchangeModel
from suites.workloads.training import Mlp

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import numpy as np
    import torch
    from torch import nn

    from suites.frameworks.torch.distributed import ProcessGroup
    from suites.frameworks.torch.models import StageLayer, TorchModel
    from suites.hardware.devices import DeviceInfo

#: Schedule parameter -> the `torch.distributed.pipelining` schedule class it runs.
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
             "interleaved_1f1b": "ScheduleInterleaved1F1B"}
#: Stages each rank holds, where a schedule holds more than one.
STAGES_PER_RANK = {"interleaved_1f1b": 2}


def stage_layers(model: "TorchModel") -> list["StageLayer"]:
    """The torch model's `stage_layers`, which must be the layers `layer_names` finds in its
    spec's parameters: the split and the state estimate are computed from those."""
    layers = model.stage_layers()
    if layers is None or [layer.names for layer in layers] != layer_names(model.spec):
        raise RuntimeError(f"{type(model).__name__}.stage_layers() does not name the layers of its "
                           f"spec's parameters ({layer_names(model.spec)})")
    return layers


# --- the plugin --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PipelineOptions:
    schedule: str = option("gpipe", choices=tuple(SCHEDULES), minimum=None,
                           help="gpipe (all forwards, then all backwards), 1f1b (one forward, one backward), "
                                "interleaved_1f1b (two stages per rank)")
    microbatches: int = option(4, help=MICROBATCHES_HELP)


@requirement("a GPU case has a visible GPU per stage: send/recv cannot share one (gloo has none for CUDA tensors)")
def gpu_per_stage(job: "Job", device: "DeviceInfo") -> str | None:
    here = devices_on_this_node(job)  # over several nodes, each holds its own stages
    if job.device is DeviceKind.GPU and device.count < here:
        return (f"a pipeline over {job.n_devices} GPUs needs {here} visible GPUs on this machine; {device.count} "
                "visible (its stages send activations with send/recv, which gloo does not do for CUDA "
                "tensors and NCCL refuses between ranks sharing a GPU)")
    return None


@requirement("two stages or more")
def two_stages(job: "Job", device: "DeviceInfo") -> str | None:
    if job.case.n_devices < 2:
        return "a pipeline of one stage runs the whole model on one device (strategy 'single' times that)"
    return None


@requirement("the model's layers split into the schedule's stages (two per rank under interleaved_1f1b)")
def layers_split(job: "Job", device: "DeviceInfo") -> str | None:
    plugin = cast("Pipeline", job.strategy)
    p, schedule, v = job.case.n_devices, plugin.schedule(job), plugin.stages_per_rank(job)
    each = f" ({v} stages each)" if v > 1 else ""
    return layers_reason(job, p * v, f"{schedule} over {p} devices{each}")


@requirement("1f1b: at least as many micro-batches as stages", name="1f1b-microbatches")
def microbatches_for_1f1b(job: "Job", device: "DeviceInfo") -> str | None:
    p, m = job.case.n_devices, microbatches_of(job)
    if Pipeline.schedule(job) == "1f1b" and m < p:
        return (f"Schedule1F1B needs at least as many micro-batches as stages: microbatches "
                f"= {m} < {p} stages (gpipe with microbatches = 1 is the naive model parallelism)")
    return None


@requirement("interleaved_1f1b: its rounds of micro-batches, max(1, m // p), divide microbatches")
def interleaved_rounds(job: "Job", device: "DeviceInfo") -> str | None:
    m = microbatches_of(job)
    rounds = max(1, m // job.case.n_devices)
    if Pipeline.schedule(job) == "interleaved_1f1b" and m % rounds:
        return (f"ScheduleInterleaved1F1B runs max(1, m // p) = {rounds} rounds of "
                f"micro-batches, which must divide microbatches = {m}")
    return None


class PipelineHooks(RankHooks):
    """The pipeline's mechanism: every rank feeds the whole batch to its stages, which the case's
    schedule steps itself (`StepsItself`), and the check gathers every stage's gradients."""

    def data_shard(self, job: "Job", rank: int) -> slice:
        """Every rank feeds the whole global batch: stage 0 its inputs, the last stage its
        targets (the schedule cuts it into micro-batches)."""
        return slice(0, job.workload.global_batch)

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "PipelineRank":
        """This rank's stages of the model and the case's schedule over them."""
        plugin = cast("Pipeline", job.strategy)
        return PipelineRank(model, device, job, plugin.schedule(job), plugin.microbatches(job),
                            plugin.stages_per_rank(job))

    def check_wrap(self, wrapped: "PipelineRank", model: "nn.Module", device: "torch.device",
                   check_job: "Job") -> "PipelineRank":
        """The same stages' schedule for the check's batch: a schedule infers its micro-batches'
        shapes once, at its first step, so the timed one must first see the timed batch."""
        return self.wrap(model, device, check_job)

    def train_step(self, wrapped: "PipelineRank", optimizer: "torch.optim.Optimizer",
                   scaler: "torch.amp.GradScaler | None") -> "PipelineRank":
        """The schedule's step, then the optimizer on this rank's parameters."""
        return wrapped.bind(optimizer, scaler)

    def gradients(self, model: Any) -> dict[str, "np.ndarray"]:
        """Every stage's gradients (each rank has its own layers'), gathered on every rank, in
        the model's canonical layout and order."""
        from suites.frameworks.torch.backend import to_numpy
        from suites.frameworks.torch.distributed import all_gather_objects
        from suites.frameworks.torch.models import canonical_array, torch_name

        parameters = dict(model.named_parameters())
        names = model.module_names()
        own = {name: canonical_array(name, to_numpy(parameters[torch_name(name)].grad))
               for name in names if parameters[torch_name(name)].grad is not None}
        gathered: dict[str, np.ndarray] = {}
        for part in all_gather_objects(own):
            gathered.update(part)  # type: ignore[arg-type]
        missing = [name for name in names if name not in gathered]
        if missing:
            raise RuntimeError(f"no stage computed the gradients of {', '.join(missing)}")
        return model.from_module({name: gathered[name] for name in names})

    def global_loss(self, group: "ProcessGroup | None", loss: float) -> float:
        """The last stage's loss (the only stage that computes one), on every rank."""
        from suites.frameworks.torch.distributed import broadcast_from

        assert group is not None
        return broadcast_from(loss, group.world_size - 1, group.device)


class Pipeline(RankProcesses):
    strategy = Strategy.PIPELINE
    # Each micro-batch's activations cross each stage boundary forward and their gradient backward;
    # the schedule leaves (stages - 1) / (micro-batches + stages - 1) of the step idle.
    exchange = ExchangeModel((Collective("send_recv", "stage_activations", "compute", per_step=2),),
                             bubble=True, source="GPipe (Huang et al. 2019): bubble (p-1)/(m+p-1)")
    # No shared GPUs: stages pass activations with send/recv, which gloo does not do for CUDA
    # tensors (the backend table of torch.distributed) and NCCL refuses between ranks on one GPU.
    rules = RankProcesses.rules.but(
        shares_gpus=False,
        compile_limits={Compile.INDUCTOR: "its schedule runs the stages' modules itself, micro-batch by micro-batch, "
                                          "which torch.compile of the model does not reach"})
    options_type = PipelineOptions
    hooks = PipelineHooks()

    @staticmethod
    def schedule(job: "Job") -> str:
        return job.options.schedule

    def batch_parts(self, job: "Job") -> int:
        return math.lcm(job.case.n_devices, job.options.microbatches)

    def sized_for(self, params: Mapping[str, object], n: int) -> dict[str, object]:
        """An mlp with a stage per device."""
        return deep_enough(params, n, Mlp().depth)

    @staticmethod
    def microbatches(job: "Job") -> int:
        return microbatches_of(job)

    def stages_per_rank(self, job: "Job") -> int:
        return STAGES_PER_RANK.get(self.schedule(job), 1)

    #: Its own GPU count first: sharing GPUs is no way out here (`gpu_per_stage`).
    requirements = (gpu_per_stage, *RankProcesses.requirements, two_stages, layers_split,
                    microbatches_divide_batch, microbatches_for_1f1b, interleaved_rounds)

    def bubble_fraction(self, job: "Job") -> float:
        return bubble(job.n_devices, self.microbatches(job), self.stages_per_rank(job))

    def state_bytes_per_device(self, job: "Job", parameters: int, optimizer_states: int) -> dict[str, int]:
        """The largest rank's share: each stage holds its layers' parameters, their gradients
        and optimizer states, and nothing of the other stages' (an interleaved rank holds two
        stages). The largest is the one that must fit."""
        return per_device_state(job.workload.model, job.n_devices, self.stages_per_rank(job),
                                parameters, optimizer_states)

    def activation_bytes_per_device(self, job: "Job", activation_bytes: int) -> int | None:
        """Not estimated: a stage keeps its own layers' activations for every micro-batch in
        flight (all of them under gpipe), not the data-parallel figure the workload supplies."""
        return None


class PipelineRank:
    """This rank's stages of the pipeline and its schedule: what `PipelineHooks.wrap` returns, and,
    bound to the runnable's optimizer and loss scaler, its `StrategyStep`."""

    def __init__(self, model: "TorchModel", device: "torch.device", job: "Job", schedule: str,
                 microbatches: int, stages_per_rank: int) -> None:
        import contextlib

        import torch
        import torch.distributed as dist
        from torch.distributed import pipelining

        from suites.frameworks.torch.backend import AUTOCAST_DTYPES, AutocastForward
        from suites.frameworks.torch.models import LayerGroup, loss_function

        layers = stage_layers(model)
        rank, ranks = dist.get_rank(), dist.get_world_size()
        total = ranks * stages_per_rank
        groups = split_layers(layer_sizes(model.spec), total)
        indices = rank_stages(rank, ranks, stages_per_rank)
        modules = [LayerGroup(model, [layers[j] for j in groups[i]]) for i in indices]
        held = {name for module in modules for name in module._modules}
        for name, child in model.named_children():
            if name not in held:  # another stage's layer: shapes without storage
                child.to("meta")
        dtype = AUTOCAST_DTYPES.get(job.precision)
        self._precision = ((lambda: torch.autocast(device.type, dtype=dtype)) if dtype is not None
                           else contextlib.nullcontext)
        stages = [pipelining.PipelineStage(module if dtype is None else
                                           AutocastForward(module, device.type, dtype),
                                           index, total, device)
                  for index, module in zip(indices, modules)]
        schedule_class = getattr(pipelining, SCHEDULES[schedule])
        self.schedule = schedule_class(stages if stages_per_rank > 1 else stages[0], microbatches,
                                       loss_fn=self._loss)
        self.first, self.last = 0 in indices, total - 1 in indices
        self.device = device
        self.loss = loss_function(model.spec)
        self.microbatches = microbatches
        #: Micro-batches whose loss this step has computed so far (the last stage's).
        self.computed = 0
        self.losses: list[torch.Tensor] = []
        self.optimizer: torch.optim.Optimizer | None = None
        self.scaler: torch.amp.GradScaler | None = None

    def bind(self, optimizer: "torch.optim.Optimizer",
             scaler: "torch.amp.GradScaler | None") -> "PipelineRank":
        import torch

        self.optimizer, self.scaler = optimizer, scaler
        if scaler is not None:
            # GradScaler makes its scale on first use; only the last stage scales a loss, but
            # every stage unscales its gradients by the same scale.
            scaler.scale(torch.zeros((), device=self.device))
        return self

    def _loss(self, output: "torch.Tensor", target: "torch.Tensor") -> "torch.Tensor":
        """The schedule's loss of one micro-batch, on the last stage (scaled under fp16)."""
        with self._precision():
            loss = self.loss(output, target)
        weight = faults.microbatch_loss_weight(self.computed, self.microbatches)
        self.computed += 1
        loss = loss if weight == 1.0 else loss * weight
        return loss if self.scaler is None else self.scaler.scale(loss)

    def backward(self, x: "torch.Tensor", y: "torch.Tensor") -> None:
        """The schedule's forward and backward of every micro-batch: this rank's stages' gradients,
        averaged over the micro-batches (the schedule's `scale_grads`)."""
        self.losses, self.computed = [], 0
        self.schedule.step(*((x,) if self.first else ()), target=y if self.last else None,
                           losses=self.losses if self.last else None, return_outputs=False)

    def step(self, x: "torch.Tensor", y: "torch.Tensor") -> "torch.Tensor":
        """One training step; the mean micro-batch loss on the last stage (the schedule's
        losses, one per micro-batch), NaN on the others."""
        import torch

        assert self.optimizer is not None, "bind the optimizer first"
        self.optimizer.zero_grad(set_to_none=True)
        self.backward(x, y)
        loss = (torch.stack(self.losses).detach().float().mean() if self.last
                else torch.tensor(float("nan")))
        if self.scaler is not None:  # the schedule's losses are the scaled ones
            loss = loss / self.scaler.get_scale()
        self._update()
        return loss

    def _update(self) -> None:
        """The optimizer step on this rank's parameters; under fp16 loss scaling, skipped on
        every stage when any stage's gradients overflowed (GradScaler decides per process: a
        stage whose own gradients are finite would otherwise step while another skips)."""
        import torch
        import torch.distributed as dist

        assert self.optimizer is not None
        if self.scaler is None:
            self.optimizer.step()
            return
        gradients = [parameter.grad for group in self.optimizer.param_groups
                     for parameter in group["params"] if parameter.grad is not None]
        finite = torch.stack([gradient.isfinite().all() for gradient in gradients]).all()
        overflow = (~finite).to(torch.float32).reshape(1)
        dist.all_reduce(overflow, op=dist.ReduceOp.MAX)
        if overflow.item() and finite.item():
            # Another stage overflowed: make GradScaler see it here too, so that it skips this
            # stage's step and lowers its scale exactly as on that stage.
            gradients[0].view(-1)[0] = float("inf")
        self.scaler.step(self.optimizer)
        self.scaler.update()


PLUGIN = Pipeline()
