"""A strategy plugin's exchange (`suites.strategies.exchange_model`) priced on a target's links.

Each collective's bytes come from its payload (gradients and parameters: the model's parameters in
fp32 or the compute dtype; a layer's or a stage boundary's activations: the per-device batch x the
model's sequence x width), its time from `alpha_beta`. What the step exposes:

- overlap "backward": the backward pass (2/3 of the compute: backward costs twice the forward)
  hides it, except the part no compute is left to hide (`unhidden_bytes`, DDP's last bucket);
- overlap "prefetch": the whole compute hides it;
- overlap "none": all of it.

The band: at best as above; at worst nothing hidden and, beyond two nodes, the fabric at the worst
share of line rate measured (`NcclConstants.fabric_fraction_low`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from suites.predict.alpha_beta import Topology, collective_seconds, point_to_point_seconds, push_pull_seconds
from suites.predict.workload import ProjectedWorkload
from suites.strategies.base import STATE_BYTES
from suites.strategies.exchange_model import Collective, ExchangeModel
from suites.workloads.collectives import DTYPE_BYTES

#: The backward pass's share of a training step's compute (3x forward: forward 1, backward 2).
BACKWARD_SHARE = 2.0 / 3.0


class NoExchangeModel(ValueError):
    """The strategy, or this workload under it, has no exchange model: the target cannot be projected."""


@dataclass(frozen=True)
class ExchangeEstimate:
    """Seconds of exchange a step exposes: `point`, `best`..`worst`; `total` what the collectives take
    unhidden; `terms` each collective's bytes and seconds; `bubble` a pipeline's idle share."""

    point: float
    best: float
    worst: float
    total: float
    terms: tuple[dict, ...]
    bubble: float = 0.0
    serial: bool = False


def payload_bytes(collective: Collective, workload: ProjectedWorkload, per_device_batch: int) -> float:
    """Bytes one rank moves in one call of `collective`."""
    dtype = STATE_BYTES if collective.dtype == "state" else DTYPE_BYTES[workload.precision]
    if collective.payload in ("gradients", "parameters"):
        return float(workload.parameters * dtype)
    spec = workload.spec
    width = getattr(spec, "d_model", None)
    seq = getattr(spec, "seq", None)
    if width is None or seq is None:
        if collective.payload == "layer_activations":
            raise NoExchangeModel(f"{collective.payload} of {workload.model}: the projection knows a layer's "
                                  "activations of transformers only (sequence x width)")
        per_sample = float(sum(spec.input_shape) if spec.input_shape else 1)
    else:
        per_sample = float(seq * width)
    return per_device_batch * per_sample * dtype


def calls_per_step(collective: Collective, workload: ProjectedWorkload) -> float:
    if collective.payload == "layer_activations":
        return collective.per_step * int(getattr(workload.spec, "layers", 1))
    return collective.per_step


def seconds_of(collective: Collective, nbytes: float, topology: Topology) -> float:
    if collective.op == "send_recv":
        return point_to_point_seconds(nbytes, topology)
    if collective.op == "push_pull":
        return push_pull_seconds(nbytes, topology)
    return collective_seconds(collective.op, nbytes, topology)[0]


def exchange_seconds(model: ExchangeModel | None, workload: ProjectedWorkload, per_device_batch: int,
                     compute_s: float, topology: Topology, worst_topology: Topology,
                     microbatches: int = 4) -> ExchangeEstimate:
    """The exchange a step of `compute_s` seconds of compute exposes on `topology` (and, for the
    band's worst end, on `worst_topology`). Raises NoExchangeModel where there is none."""
    if model is None:
        raise NoExchangeModel(f"{workload.framework} {workload.strategy} declares no exchange model "
                              "(its plugin's `exchange` is None)")
    terms, point, best, worst, total = [], 0.0, 0.0, 0.0, 0.0
    for collective in model.collectives:
        nbytes = payload_bytes(collective, workload, per_device_batch)
        calls = calls_per_step(collective, workload)
        seconds = calls * seconds_of(collective, nbytes, topology)
        slowest = calls * seconds_of(collective, nbytes, worst_topology)
        unhidden = seconds_of(collective, min(nbytes, model.unhidden_bytes), topology) if model.unhidden_bytes else 0
        window = {"backward": BACKWARD_SHARE * compute_s, "prefetch": compute_s, "none": 0.0}[collective.overlap]
        exposed = seconds if collective.overlap == "none" else max(unhidden, seconds - window)
        terms.append({"op": collective.op, "payload": collective.payload, "bytes": nbytes, "calls": calls,
                      "seconds": seconds, "exposed_s": exposed, "overlap": collective.overlap})
        point, best, worst, total = point + exposed, best + exposed, worst + slowest, total + seconds
    bubble = 0.0
    if model.bubble and topology.ranks > 1:
        bubble = (topology.ranks - 1) / (microbatches + topology.ranks - 1)
    return ExchangeEstimate(point, best, max(worst, point), total, tuple(terms), bubble, model.serial)


def worst_case(topology: Topology, fraction_low: float) -> Topology:
    """The topology with its fabric at the worst share of line rate measured (beyond two nodes)."""
    if topology.nodes <= 2:
        return topology
    return replace(topology, node_gbs=topology.node_gbs * fraction_low)
