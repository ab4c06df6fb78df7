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

import itertools
from typing import TYPE_CHECKING, Any, Sequence

from suites.cases.case import Case
from suites.cases.vocabulary import Compile, Strategy
from suites.strategies.base import STATE_BYTES
from suites.strategies.torch.base import RankProcesses
from suites.workloads import workload_of
from suites.workloads.base import Param

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from suites.frameworks.torch.distributed import ProcessGroup
    from suites.frameworks.torch.models import StageLayer, TorchModel
    from suites.kept.devices import DeviceInfo
    from suites.workloads.training import ModelSpec

#: Schedule parameter -> the `torch.distributed.pipelining` schedule class it runs.
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
             "interleaved_1f1b": "ScheduleInterleaved1F1B"}
#: Stages each rank holds, where a schedule holds more than one.
STAGES_PER_RANK = {"interleaved_1f1b": 2}


# --- the split, framework-neutral ------------------------------------------------------------
def layer_names(spec: "ModelSpec") -> list[tuple[str, ...]]:
    """The spec's layers in order, each as the top-level prefixes of the parameters it holds
    (the names `TorchModel.stage_layers` gives its layers): one layer per prefix, except that a
    prefix without a kernel (a normalisation's scale and shift) is no layer of its own but
    normalises the next layer's input and goes with it. Empty where the spec names no
    parameters (a user model: its layers are its framework's)."""
    shapes = spec.parameter_shapes()
    prefixes = list(dict.fromkeys(name.split(".")[0] for name in shapes))
    with_kernel = {name.split(".")[0] for name in shapes if name.endswith(".kernel")}
    layers: list[tuple[str, ...]] = []
    pending: list[str] = []
    for prefix in prefixes:
        pending.append(prefix)
        if prefix in with_kernel:
            layers.append(tuple(pending))
            pending = []
    if pending and layers:
        layers[-1] += tuple(pending)
    return layers


def layer_sizes(spec: "ModelSpec") -> list[int]:
    """Parameters of each of `layer_names(spec)`."""
    counts: dict[str, int] = {}
    for name, shape in spec.parameter_shapes().items():
        prefix = name.split(".")[0]
        counts[prefix] = counts.get(prefix, 0) + int(_product(shape))
    return [sum(counts[prefix] for prefix in layer) for layer in layer_names(spec)]


def _product(shape: Sequence[int]) -> int:
    result = 1
    for extent in shape:
        result *= extent
    return result


def split_layers(sizes: Sequence[int], parts: int) -> list[range]:
    """`parts` contiguous, non-empty groups of the layers (indices into `sizes`) whose largest
    parameter count is as small as it can be; of equal splits, the one with the earliest cut.
    Raises ValueError where there are fewer layers than parts."""
    n = len(sizes)
    if not 1 <= parts <= n:
        raise ValueError(f"{n} layers cannot make {parts} non-empty stages")
    prefix = [0, *itertools.accumulate(sizes)]
    # best[k][i]: the smallest largest group of layers[:i] cut into k groups; cut[k][i]: its last cut.
    best = [[float("inf")] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                largest = max(best[k - 1][j], prefix[i] - prefix[j])
                if largest < best[k][i]:
                    best[k][i], cut[k][i] = largest, j
    bounds = [n]
    for k in range(parts, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    bounds.reverse()
    return [range(start, stop) for start, stop in zip(bounds, bounds[1:])]


def rank_stages(rank: int, ranks: int, stages_per_rank: int) -> list[int]:
    """The stages rank `rank` holds: `rank`, `rank + ranks`, ... (torch's looped placement)."""
    return [rank + k * ranks for k in range(stages_per_rank)]


def bubble(stages: int, microbatches: int, stages_per_device: int = 1) -> float:
    """The theoretical pipeline bubble, (p - 1) / (v*m + p - 1): the share of a step each of
    the p devices idles, with m micro-batches and v stages per device (equal stage times, free
    communication). One device: no bubble; one micro-batch, one stage per device: (p - 1) / p,
    one device busy at a time."""
    p, m, v = stages, microbatches, stages_per_device
    return (p - 1) / (v * m + p - 1)


def largest_share(spec: "ModelSpec", devices: int, stages_per_device: int = 1) -> int | None:
    """Parameters on the device that holds the most, with the model split into
    `devices * stages_per_device` stages (looped); None where it cannot be split so."""
    sizes = layer_sizes(spec)
    stages = devices * stages_per_device
    if len(sizes) < stages:
        return None
    totals = [sum(sizes[j] for j in group) for group in split_layers(sizes, stages)]
    return max(sum(totals[i] for i in rank_stages(rank, devices, stages_per_device))
               for rank in range(devices))


def stage_layers(model: "TorchModel") -> list["StageLayer"]:
    """The torch model's `stage_layers`, which must be the layers `layer_names` finds in its
    spec's parameters: the split and the state estimate are computed from those."""
    layers = model.stage_layers()
    if layers is None or [layer.names for layer in layers] != layer_names(model.spec):
        raise RuntimeError(f"{type(model).__name__}.stage_layers() does not name the layers of its "
                           f"spec's parameters ({layer_names(model.spec)})")
    return layers


def layers_reason(case: Case, stages: int, how: str) -> str | None:
    """Why the case's model cannot be split into `stages` contiguous stages (`how`: how they
    come about), or None."""
    workload = workload_of(case)
    layers = layer_names(workload.model)
    model = workload.p["model"]
    if not layers:
        return (f"model {model!r} names no layers parbench can split into stages (a user "
                "model's layers are known only to its framework)")
    if len(layers) < stages:
        return (f"{how} makes {stages} stages, and model {model!r} has {len(layers)} layers to "
                f"split ({', '.join('+'.join(layer) for layer in layers)})")
    return None


def per_device_state(spec: "ModelSpec", devices: int, stages_per_device: int, parameters: int,
                     optimizer_states: int) -> dict[str, int]:
    """Training state of the device holding the largest share of the layers: its parameters,
    their gradients and optimizer states, fp32 (the whole model where it cannot be split)."""
    held = largest_share(spec, devices, stages_per_device) or parameters
    weights = held * STATE_BYTES
    state = {"parameters": weights, "gradients": weights, "optimizer": optimizer_states * weights}
    return {**state, "total": sum(state.values())}


# --- the plugin --------------------------------------------------------------------------------
class Pipeline(RankProcesses):
    strategy = Strategy.PIPELINE
    compile_limits = {Compile.INDUCTOR: "its schedule runs the stages' modules itself, micro-batch by micro-batch, "
                                        "which torch.compile of the model does not reach"}
    params = (
        Param("schedule", type=str, default="gpipe", choices=tuple(SCHEDULES), minimum=None,
              help="gpipe (all forwards, then all backwards), 1f1b (one forward, one backward), "
                   "interleaved_1f1b (two stages per rank)"),
        Param("microbatches", default=4,
              help="micro-batches each step's global batch is cut into (must divide it); "
                   "1 is naive model parallelism, one stage busy at a time"),
    )

    @staticmethod
    def schedule(case: Case) -> str:
        return str(workload_of(case).p["schedule"])

    @staticmethod
    def microbatches(case: Case) -> int:
        return int(workload_of(case).p["microbatches"])

    def stages_per_rank(self, case: Case) -> int:
        return STAGES_PER_RANK.get(self.schedule(case), 1)

    def unavailable_reason(self, case: Case, device: "DeviceInfo") -> str | None:
        reason = super().unavailable_reason(case, device)
        if reason:
            return reason
        p, m, schedule = case.n_devices, self.microbatches(case), self.schedule(case)
        if p < 2:
            return ("a pipeline of one stage runs the whole model on one device (strategy "
                    "'single' times that)")
        v = self.stages_per_rank(case)
        each = f" ({v} stages each)" if v > 1 else ""
        reason = layers_reason(case, p * v, f"{schedule} over {p} devices{each}")
        if reason:
            return reason
        batch = workload_of(case).global_batch
        if batch % m:
            return f"microbatches = {m} does not divide the global batch of {batch}"
        if schedule == "1f1b" and m < p:
            return (f"Schedule1F1B needs at least as many micro-batches as stages: microbatches "
                    f"= {m} < {p} stages (gpipe with microbatches = 1 is the naive model parallelism)")
        rounds = max(1, m // p)
        if schedule == "interleaved_1f1b" and m % rounds:
            return (f"ScheduleInterleaved1F1B runs max(1, m // p) = {rounds} rounds of "
                    f"micro-batches, which must divide microbatches = {m}")
        return None

    def bubble_fraction(self, case: Case) -> float:
        return bubble(case.n_devices, self.microbatches(case), self.stages_per_rank(case))

    def state_bytes_per_device(self, case: Case, parameters: int, optimizer_states: int) -> dict[str, int]:
        """The largest rank's share: each stage holds its layers' parameters, their gradients
        and optimizer states, and nothing of the other stages' (an interleaved rank holds two
        stages). The largest is the one that must fit."""
        return per_device_state(workload_of(case).model, case.n_devices, self.stages_per_rank(case),
                                parameters, optimizer_states)

    def activation_bytes_per_device(self, case: Case, activation_bytes: int) -> int | None:
        """Not estimated: a stage keeps its own layers' activations for every micro-batch in
        flight (all of them under gpipe), not the data-parallel figure the workload supplies."""
        return None

    def data_shard(self, case: Case, rank: int) -> slice:
        """Every rank feeds the whole global batch: stage 0 its inputs, the last stage its
        targets (the schedule cuts it into micro-batches)."""
        return slice(0, workload_of(case).global_batch)

    def wrap(self, model: "nn.Module", device: "torch.device", case: Case) -> "PipelineRank":
        """This rank's stages of the model and the case's schedule over them."""
        return PipelineRank(model, device, case, self.schedule(case), self.microbatches(case),
                            self.stages_per_rank(case))

    def train_step(self, wrapped: "PipelineRank", optimizer: "torch.optim.Optimizer",
                   scaler: "torch.amp.GradScaler | None") -> "PipelineRank":
        """The schedule's step, then the optimizer on this rank's parameters."""
        return wrapped.bind(optimizer, scaler)

    def gradients(self, model: Any) -> dict[str, "np.ndarray"]:
        """Every stage's gradients (each rank has its own layers'), gathered on every rank, in
        the model's canonical layout and order."""
        from suites.frameworks.torch.backend import to_numpy
        from suites.frameworks.torch.distributed import all_gather_objects
        from suites.frameworks.torch.models import to_canonical_layout, torch_name

        parameters = dict(model.named_parameters())
        own = {name: to_canonical_layout(to_numpy(parameters[torch_name(name)].grad))
               for name in model.spec.parameter_shapes()
               if parameters[torch_name(name)].grad is not None}
        gathered: dict[str, np.ndarray] = {}
        for part in all_gather_objects(own):
            gathered.update(part)  # type: ignore[arg-type]
        missing = [name for name in model.spec.parameter_shapes() if name not in gathered]
        if missing:
            raise RuntimeError(f"no stage computed the gradients of {', '.join(missing)}")
        return {name: gathered[name] for name in model.spec.parameter_shapes()}

    def global_loss(self, group: "ProcessGroup | None", loss: float) -> float:
        """The last stage's loss (the only stage that computes one), on every rank."""
        from suites.frameworks.torch.distributed import broadcast_from

        assert group is not None
        return broadcast_from(loss, group.world_size - 1, group.device)


class PipelineRank:
    """This rank's stages of the pipeline and its schedule: what `Pipeline.wrap` returns, and,
    bound to the runnable's optimizer and loss scaler, its `StrategyStep`."""

    def __init__(self, model: "TorchModel", device: "torch.device", case: Case, schedule: str,
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
        dtype = AUTOCAST_DTYPES.get(case.precision)
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
        return loss if self.scaler is None else self.scaler.scale(loss)

    def backward(self, x: "torch.Tensor", y: "torch.Tensor") -> None:
        """The schedule's forward and backward of every micro-batch: this rank's stages' gradients,
        averaged over the micro-batches (the schedule's `scale_grads`)."""
        self.losses = []
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
