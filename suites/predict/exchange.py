"""A strategy plugin's exchange (`suites.strategies.exchange_model`) priced on a target's links.

Each collective's bytes come from its payload (gradients and parameters: the model's parameters in
fp32 or the compute dtype; a layer's or a stage boundary's activations: the per-device batch x the
model's sequence x width), its time from `alpha_beta`; a per-unit collective (FSDP) is one call per
wrapping unit over that unit's parameters, each paying the latency. What the step exposes, per
window of compute that can hide it (the collectives sharing a window share its seconds):

- overlap "forward": the forward pass (1/3 of the compute) hides it; "backward": the backward pass
  (2/3: backward costs twice the forward); each except the part no compute is left to hide: DDP's
  last bucket (`unhidden_bytes`), the call of the unit a pass starts or ends with (`exposed_unit`);
- overlap "none", or a collective issued on streams (`issue = "stream"`) where the backend has none
  (gloo): all of it.

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
#: The compute share of each window that can hide a collective.
WINDOWS = {"forward": 1.0 - BACKWARD_SHARE, "backward": BACKWARD_SHARE}


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


def unit_pieces(collective: Collective, nbytes: float, workload: ProjectedWorkload) -> list[float]:
    """Bytes of each call: one per wrapping unit (its share of the payload) for a per-unit collective."""
    if not collective.per_unit:
        return [nbytes]
    units = workload.units or (workload.parameters,)
    total = float(sum(units))
    return [nbytes * unit / total for unit in units]


def unhidden_seconds(model: ExchangeModel, collective: Collective, pieces: list[float], topology: Topology) -> float:
    """What no compute is left to hide of an overlapped collective: the unit a pass starts or ends with,
    or the last bucket."""
    if collective.exposed_unit:
        return seconds_of(collective, pieces[0 if collective.exposed_unit == "first" else -1], topology)
    if model.unhidden_bytes:
        return seconds_of(collective, min(sum(pieces), model.unhidden_bytes), topology)
    return 0.0


def exchange_seconds(model: ExchangeModel | None, workload: ProjectedWorkload, per_device_batch: int,
                     compute_s: float, topology: Topology, worst_topology: Topology,
                     microbatches: int = 4) -> ExchangeEstimate:
    """The exchange a step of `compute_s` seconds of compute exposes on `topology` (and, for the
    band's worst end, on `worst_topology`). Raises NoExchangeModel where there is none."""
    if model is None:
        raise NoExchangeModel(f"{workload.framework} {workload.strategy} declares no exchange model "
                              "(its plugin's `exchange` is None)")
    terms, worst, total = [], 0.0, 0.0
    windows: dict[str, list[float]] = {}  # window -> [seconds, unhidden seconds]
    for collective in model.collectives:
        nbytes = payload_bytes(collective, workload, per_device_batch)
        calls = calls_per_step(collective, workload)
        pieces = unit_pieces(collective, nbytes, workload)
        seconds = calls * sum(seconds_of(collective, piece, topology) for piece in pieces)
        slowest = calls * sum(seconds_of(collective, piece, worst_topology) for piece in pieces)
        hidden = collective.overlap != "none" and (collective.issue == "async" or topology.streams)
        window = collective.overlap if hidden else "none"
        unhidden = seconds if window == "none" else unhidden_seconds(model, collective, pieces, topology)
        sums = windows.setdefault(window, [0.0, 0.0])
        sums[0], sums[1] = sums[0] + seconds, sums[1] + unhidden
        terms.append({"op": collective.op, "payload": collective.payload, "bytes": nbytes, "calls": calls * len(pieces),
                      "seconds": seconds, "overlap": window})
        worst, total = worst + slowest, total + seconds
    exposed = {name: (seconds if name == "none" else max(unhidden, seconds - WINDOWS[name] * compute_s))
               for name, (seconds, unhidden) in windows.items()}
    for term in terms:  # each collective's share of its window's exposed seconds
        window_seconds = windows[term["overlap"]][0]
        term["exposed_s"] = exposed[term["overlap"]] * term["seconds"] / window_seconds if window_seconds else 0.0
    point = sum(exposed.values())
    bubble = 0.0
    if model.bubble and topology.ranks > 1:
        bubble = (topology.ranks - 1) / (microbatches + topology.ranks - 1)
    return ExchangeEstimate(point, point, max(worst, point), total, tuple(terms), bubble, model.serial)


def worst_case(topology: Topology, fraction_low: float) -> Topology:
    """The topology with its fabric at the worst share of line rate measured (beyond two nodes)."""
    if topology.nodes <= 2:
        return topology
    return replace(topology, node_gbs=topology.node_gbs * fraction_low)
