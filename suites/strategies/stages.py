"""A model's layers split into contiguous stages, framework-neutral: what `pipeline` and
`model_parallel` of every framework place on their devices, and the analytic figures of the
split (the pipeline bubble, the state the most loaded device holds).

The layers are those of a spec's parameters (`layer_names`): the MLP's dense layers, the CNN's
stem, blocks and head, the transformer's blocks and head. A framework's model must expose the
same layers (torch: `TorchModel.stage_layers`; TF: `suites.frameworks.tf.catalog.layer_forwards`).
"""
from __future__ import annotations

from dataclasses import dataclass
import itertools
from typing import TYPE_CHECKING, Sequence

from suites.strategies.base import STATE_BYTES
from suites.strategies.options import option
from suites.strategies.requirements import requirement

if TYPE_CHECKING:
    from suites.hardware.devices import DeviceInfo
    from suites.strategies.jobs import Job
    from suites.workloads.training import ModelSpec


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


def stage_split(spec: "ModelSpec", stages: int) -> str:
    """The layers of each of `stages` contiguous stages, e.g. "dense0+dense1 | dense2+dense3"."""
    names = layer_names(spec)
    return " | ".join("+".join(prefix for j in group for prefix in names[j])
                      for group in split_layers(layer_sizes(spec), stages))


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


def layers_reason(job: "Job", stages: int, how: str) -> str | None:
    """Why the case's model cannot be split into `stages` contiguous stages (`how`: how they
    come about), or None."""
    workload = job.workload
    layers = layer_names(workload.model)
    model = workload.p["model"]
    if not layers:
        return (f"model {model!r} names no layers parbench can split into stages (a user "
                "model's layers are known only to its framework)")
    if getattr(workload.model, "tied_embedding", False):
        return (f"model {model!r} ties its token embedding to its LM head, one table at both ends "
                "of the model; parbench does not split it into stages (Megatron keeps a copy on the "
                "first and last stage and all-reduces their gradients): use ddp, fsdp or tensor, or "
                "llama_block, whose head is untied")
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


# --- micro-batches (a pipeline's parameter) ----------------------------------------------------
MICROBATCHES_HELP = ("micro-batches each step's global batch is cut into (must divide it); "
                     "1 is naive model parallelism, one stage busy at a time")


@dataclass(frozen=True)
class MicrobatchOptions:
    """A pipeline's options (TF's; torch's adds a schedule)."""

    microbatches: int = option(4, help=MICROBATCHES_HELP)


def microbatches_of(job: "Job") -> int:
    return job.options.microbatches


@requirement("`microbatches` divides the global batch")
def microbatches_divide_batch(job: "Job", device: "DeviceInfo") -> str | None:
    """A pipeline's rule, in both frameworks: why the case's global batch cannot be cut into its
    micro-batches, or None."""
    m, batch = microbatches_of(job), job.workload.global_batch
    if batch % m:
        return f"microbatches = {m} does not divide the global batch of {batch}"
    return None
