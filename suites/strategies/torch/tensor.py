"""torch `tensor`: tensor parallelism with DTensor (`parallelize_module`), one rank process per
device, each holding a slice of every split layer.

Layers split in Megatron's pairs: the first of a pair by columns (`ColwiseParallel`: each rank
computes its share of the output features), the second by rows (`RowwiseParallel`: each rank
multiplies its share of the input features and an all-reduce sums the partial outputs), so a
pair costs one all-reduce forward and one backward. The MLP's dense layers pair up in order (an
odd last one stays whole); a transformer block (the built-in one, BERT's, GPT-2's, Llama's)
splits its attention by heads (q, k, v by columns, o by rows: each rank attends with its heads,
a Llama block's query heads with their key/value heads) and its feed-forward (in, or SwiGLU's
gate and up, by columns; out, or down, by rows). Norms, unpaired layers and row-split layers'
biases are replicated. The plan is read
from the model's parameter names, which are its module paths, so a stack of blocks splits every
block.

Tensor parallelism splits the layers, not the batch: every rank feeds the same, whole global
batch. The check gathers the fp32 first-step gradients to full tensors and compares them with
the single-device gradient; bf16 (autocast) follows the fp32 loss trajectory.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from suites.cases.vocabulary import Precision, Strategy
from suites.strategies.base import STATE_BYTES
from suites.strategies.requirements import requirement
from suites.strategies.torch.base import RankHooks, RankProcesses
from suites.strategies.exchange_model import Collective, ExchangeModel
from suites.workloads.training import Mlp, ModelSpec, TransformerBlock
from suites.models.llama.spec import LlamaBlock

if TYPE_CHECKING:
    from suites.strategies.jobs import Job
    import numpy as np
    import torch
    from torch import nn
    from torch.distributed.device_mesh import DeviceMesh

    from suites.hardware.devices import DeviceInfo

COLWISE, ROWWISE = "colwise", "rowwise"
#: A transformer block's split layers, by the last two parts of their module path: attention by
#: heads (the fused q, k, v layer, `suites.frameworks.torch.qkv`, whole kv groups to a rank), the
#: feed-forward in / out pair, a Llama block's SwiGLU (gate and up by columns, down by rows).
TRANSFORMER_SPLITS = {"attn.qkv": COLWISE, "attn.o": ROWWISE,
                      "ffn.in": COLWISE, "ffn.out": ROWWISE,
                      "ffn.gate": COLWISE, "ffn.up": COLWISE, "ffn.down": ROWWISE}
FP16_UNAVAILABLE = (
    "fp16 needs loss scaling, and torch.amp.GradScaler unscales all of a device's gradients in "
    "one foreach call, which fails on the mix tensor parallelism leaves (split layers' DTensor "
    "gradients beside the replicated layers' plain ones, torch 2.13); bf16 needs no loss scaling")


def _dense_layers(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Module path -> kernel shape (in, out) of the spec's dense layers, in order."""
    return {name.rpartition(".")[0]: shape for name, shape in spec.parameter_shapes().items()
            if name.endswith(".kernel") and len(shape) == 2}


def tensor_plan(spec: ModelSpec) -> dict[str, str] | None:
    """Module path -> COLWISE or ROWWISE, the layers tensor parallelism splits; None for a
    model without a plan (a CNN's convolutions, a user's module)."""
    layers = list(_dense_layers(spec))
    if isinstance(spec, Mlp):
        return {path: (COLWISE, ROWWISE)[i % 2] for i, path in enumerate(layers[:len(layers) // 2 * 2])}
    if isinstance(spec, (TransformerBlock, LlamaBlock)):
        return {path: TRANSFORMER_SPLITS[tail] for path in map(module_path, layers)
                if (tail := ".".join(path.split(".")[-2:])) in TRANSFORMER_SPLITS}
    return None


def plan_problem(job: "Job", ranks: int) -> str | None:
    """Why the case's model cannot be split over `ranks` tensor-parallel ranks, or None."""
    spec = job.workload.model
    plan = tensor_plan(spec)
    if plan is None:
        return (f"tensor parallelism has no plan for model {job.workload.p['model']!r}: "
                "plans exist for mlp (dense layers in column/row pairs) and the transformers "
                "(transformer, bert_base, gpt2_small, llama_block: attention heads, feed-forward)")
    if isinstance(spec, (TransformerBlock, LlamaBlock)) and spec.heads % ranks:
        return (f"the transformer's {spec.heads} attention heads do not split evenly over "
                f"{ranks} tensor-parallel ranks")
    if isinstance(spec, LlamaBlock) and spec.kv_heads % ranks:
        return (f"the llama_block's {spec.kv_heads} key/value heads do not split evenly over "
                f"{ranks} tensor-parallel ranks")
    layers = _dense_layers(spec)
    for path, style in plan.items():
        if path not in layers:  # a fused q, k, v layer: whole heads, checked above
            continue
        fan_in, fan_out = layers[path]
        features, side = (fan_out, "output") if style == COLWISE else (fan_in, "input")
        if features % ranks:
            return (f"layer {path}'s {features} {side} features do not split evenly over {ranks} "
                    f"tensor-parallel ranks ({style})")
    return None


def module_path(layer: str) -> str:
    """A canonical layer's torch module path: an attention's q, k and v are its fused ``qkv``."""
    head, _, last = layer.rpartition(".")
    return f"{head}.qkv" if last in ("q", "k", "v") and head.endswith("attn") else layer


def elements_saved(job: "Job", ranks: int) -> dict[str, int]:
    """Canonical parameter name -> elements one of `ranks` tensor-parallel ranks does not hold:
    (ranks - 1) / ranks of a column-split layer's kernel and bias and of a row-split layer's
    kernel; nothing of a replicated parameter."""
    spec = job.workload.model
    plan = tensor_plan(spec) or {}
    saved = {}
    for name, shape in spec.parameter_shapes().items():
        path, _, leaf = name.rpartition(".")
        style = plan.get(module_path(path))
        split = style == COLWISE or (style == ROWWISE and leaf == "kernel")
        saved[name] = math.prod(shape) - math.prod(shape) // ranks if split else 0
    return saved


def parallelize(model: "nn.Module", mesh: "DeviceMesh") -> None:
    """Split `model`'s layers over `mesh` (1-D, the tensor-parallel ranks) by its `tensor_plan`."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {COLWISE: ColwiseParallel, ROWWISE: RowwiseParallel}
    plan = tensor_plan(model.spec)  # type: ignore[arg-type]
    assert plan is not None, "the plan-fits requirement keeps models without a plan out"
    parallelize_module(model, mesh, {path: styles[style]() for path, style in plan.items()})


@requirement("not fp16: GradScaler fails on split and replicated gradients together (bf16 needs no scaling)")
def no_fp16(job: "Job", device: "DeviceInfo") -> str | None:
    return FP16_UNAVAILABLE if job.case.precision is Precision.FP16 else None


@requirement("the model has a tensor-parallel plan whose heads and split widths divide over the ranks")
def plan_fits(job: "Job", device: "DeviceInfo") -> str | None:
    return plan_problem(job, job.case.n_devices)


class TensorHooks(RankHooks):
    """Tensor parallelism's mechanism: the whole batch on every rank, the model's layers split
    in place (`parallelize`), the gradients gathered for the check."""

    def data_shard(self, job: "Job", rank: int) -> slice:
        """The whole global batch, on every rank."""
        return slice(0, job.workload.global_batch)

    def wrap(self, model: "nn.Module", device: "torch.device", job: "Job") -> "nn.Module":
        from torch.distributed.device_mesh import init_device_mesh

        parallelize(model, init_device_mesh(device.type, (job.n_devices,)))
        return model

    def gradients(self, model: Any) -> dict[str, "np.ndarray"]:
        return model.canonical_gradients(gather=True)


class Tensor(RankProcesses):
    strategy = Strategy.TENSOR
    # Megatron-style: two all-reduces of a layer's activations in its forward, two in its backward,
    # on the critical path.
    exchange = ExchangeModel((Collective("all_reduce", "layer_activations", "compute", per_step=4),),
                             source="Shoeybi et al. 2019 (Megatron-LM), section 3: 2 all-reduces forward, "
                                    "2 backward per transformer layer")
    requirements = (no_fp16, *RankProcesses.requirements, plan_fits)
    hooks = TensorHooks()

    def state_bytes_per_device(self, job: "Job", parameters: int, optimizer_states: int) -> dict[str, int]:
        """Parameters, gradients and optimizer states of the split layers divided by the ranks,
        the replicated rest whole; fp32."""
        held = parameters - sum(elements_saved(job, job.n_devices).values())
        state = {"parameters": held * STATE_BYTES, "gradients": held * STATE_BYTES,
                 "optimizer": optimizer_states * held * STATE_BYTES}
        return {**state, "total": sum(state.values())}

    def activation_bytes_per_device(self, job: "Job", activation_bytes: int) -> int | None:
        """Not estimated: every tensor-parallel rank runs its group's whole batch, and only the
        split layers' activations are split (the replicated rest is whole), which the
        data-parallel figure the workload supplies does not say."""
        return None


PLUGIN = Tensor()
