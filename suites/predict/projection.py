"""A target's projection: step time, throughput, memory, cost, what limits it, and the band.

step = per-device compute / (1 - pipeline bubble) (x devices where one device works at a time)
       + the exchange the step exposes (`exchange`),
throughput = global batch / step. Every figure is labelled projected and carries its inputs; nothing
here writes a record. `project` takes one target; `projections_frame` many, as rows for a report view.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from suites.errors import UserError
from suites.predict.alpha_beta import Topology
from suites.predict.base import Base, Spread, split_count
from suites.predict.catalogue import Catalogue, DeviceType, Fabric
from suites.predict.compute import per_sample_seconds
from suites.predict.exchange import NoExchangeModel, exchange_seconds, worst_case
from suites.predict.inputs import Input
from suites.predict.memory import memory_per_device
from suites.predict.roofline import limited_by
from suites.predict.workload import ProjectedWorkload

#: The throughput a multi-device step may lose to what the model leaves out (input pipeline, launch
#: and clocks under load across devices): the band's slow end on more than one device (assumed;
#: `--host-margin`).
HOST_MARGIN = 0.10
#: What a host data loader (decoding on the CPU: torch's DataLoader) may cost a step of 8 GPUs in one host,
#: which the point does not price: NVIDIA measured torch's DataLoader at 1,110 ms a batch against DALI's
#: 868 ms on 8 x A100-SXM4-80GB (935 against 829 on 2 GPUs): NVIDIA ACCV-Lab, DALI Pipeline Framework,
#: "Evaluation" (nvidia.github.io/ACCV-Lab). The band's slow end for a step read through such a loader
#: (`--host-margin 0.22`).
HOST_LOADER_MARGIN = 1 - 868 / 1110


@dataclass(frozen=True)
class Target:
    device: DeviceType
    devices: int
    nodes: int

    @property
    def per_node(self) -> int:
        return self.devices // self.nodes


@dataclass(frozen=True)
class Options:
    fabric: Fabric
    fabric_said: str
    scaling: str = "weak"
    global_batch: int | None = None
    batch: int | None = None
    microbatches: int = 4
    host_margin: float = HOST_MARGIN
    samples: float | None = None
    tokens: float | None = None
    prices: Any = None  # a suites.report.analyses.prices.PriceTable, or None: no cost
    #: The per-device batch is reached by accumulating micro-batches of a constant size: time per
    #: sample does not depend on it (no batch-size widening of the band).
    accumulated: bool = False


@dataclass
class Projection:
    """One target's projection (always projected, never a measurement)."""

    device: str
    devices: int
    nodes: int
    network: str
    scaling: str
    per_device_batch: int | None = None
    global_batch: int | None = None
    samples_per_s: float | None = None
    per_device_samples_per_s: float | None = None
    tokens_per_s: float | None = None
    step_s: float | None = None
    band: tuple[float, float] | None = None
    limited_by: str | None = None
    memory_per_device_bytes: float | None = None
    fits: bool | None = None
    max_batch_per_device: int | None = None
    cost_per_million: float | None = None
    cost_per_million_tokens: float | None = None
    cost_of_work: float | None = None
    price_rule: str = ""
    inputs: dict[str, Input] = field(default_factory=dict)
    terms: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    projected: bool = True

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in (
            "device", "devices", "nodes", "network", "scaling", "per_device_batch", "global_batch", "samples_per_s",
            "per_device_samples_per_s", "tokens_per_s", "step_s", "limited_by", "memory_per_device_bytes", "fits",
            "max_batch_per_device", "cost_per_million", "cost_per_million_tokens", "cost_of_work", "price_rule",
            "terms", "notes", "error", "projected")}
        data["band"] = list(self.band) if self.band else None
        data["inputs"] = {name: value.to_dict() for name, value in self.inputs.items()}
        return data


def parse_target(text: str, catalogue: Catalogue) -> Target:
    """`--to DEVICE:N` or `--to DEVICE:GxK`."""
    match = re.fullmatch(r"(.+):([^:]+)", text.strip())
    if not match:
        raise UserError(f"--to {text!r}: expected DEVICE:N or DEVICE:GxK, e.g. \"H100 SXM:8\" or \"H200:8x2\"")
    devices, nodes = split_count(match.group(2), f"--to {text!r}")
    return Target(catalogue.device(match.group(1).strip()), devices, nodes)


def topology(device: DeviceType, per_node: int, nodes: int, fabric: Fabric, catalogue: Catalogue) -> Topology:
    nccl = catalogue.nccl
    pcie = "pcie" in device.link.lower()
    return Topology(per_node, nodes, device.link_gbs, fabric.node_gbs * nccl.fabric_fraction,
                    (nccl.pcie_ring_us if pcie else nccl.nvlink_ring_us) * 1e-6, nccl.net_ring_us * 1e-6,
                    nccl.ring_base_us * 1e-6, (nccl.pcie_tree_us if pcie else nccl.nvlink_tree_us) * 1e-6,
                    nccl.net_tree_us * 1e-6, nccl.tree_base_us * 1e-6, nccl.ring_plateau, nccl.tree_bandwidth)


def base_compute_per_sample(base: Base, workload: ProjectedWorkload, options: Options,
                            catalogue: Catalogue) -> tuple[float, list[str]]:
    """One device's compute seconds per sample in the base: its time per sample, less the exchange its
    own step exposed (projected on its own topology) where it ran on several real devices."""
    notes = []
    if base.emulated or base.devices == 1:
        if base.emulated:
            notes.append(f"the base's {base.devices} ranks shared its devices (emulated): taken as one device's "
                         "throughput")
        return 1.0 / base.samples_per_s, notes
    per_sample = base.devices / base.samples_per_s
    batch = base.per_device_batch or options.batch
    if base.device is None or batch is None:
        notes.append("the base ran on several devices and its exchange could not be taken out (board not "
                     "catalogued or batch unknown): it stays in the compute")
        return per_sample, notes
    own = topology(base.device, base.per_node, base.nodes, options.fabric, catalogue)
    try:
        exposed = exchange_seconds(workload.plugin.exchange, workload, batch, per_sample * batch, own, own,
                                   options.microbatches).point
    except NoExchangeModel:
        return per_sample, notes
    return max(per_sample * 0.01, per_sample - exposed / batch), notes


def batch_for(target: Target, base: Base, options: Options) -> tuple[int, int, list[str]]:
    """(per-device batch, global batch, notes) on the target under the batch policy."""
    base_batch = options.batch or base.per_device_batch
    if options.scaling == "weak":
        if base_batch is None:
            raise UserError("the base's per-device batch is unknown: give it (--base ...@BATCH) or --batch")
        return base_batch, base_batch * target.devices, []
    total = options.global_batch or (base_batch * base.devices if base_batch else None)
    if total is None:
        raise UserError("strong scaling keeps the global batch: give --global-batch")
    per_device = total // target.devices
    if per_device < 1:
        raise UserError(f"--global-batch {total} is smaller than the {target.devices} devices of a target")
    notes = [] if total % target.devices == 0 else [f"global batch {total} does not split over {target.devices} "
                                                    f"devices: {per_device} each"]
    return per_device, per_device * target.devices, notes


def project(workload: ProjectedWorkload, base: Base, target: Target, options: Options,
            catalogue: Catalogue) -> Projection:
    """One target's projection; a target that cannot be projected gets its `error`, not an exception."""
    result = Projection(target.device.label, target.devices, target.nodes,
                        options.fabric.label if target.nodes > 1 else f"{target.device.link} (one node)",
                        options.scaling)
    precision = str(workload.precision)
    for board in (base.device, target.device):
        if board is not None and precision not in board.peak_tflops:
            runs = ", ".join(sorted(board.peak_tflops))
            result.error = (f"{board.label} has no {precision} peak in suites/peaks.toml (it runs {runs}): "
                            "pick one of those with --precision, or another board")
            return result
    try:
        _fill(result, workload, base, target, options, catalogue)
    except NoExchangeModel as error:
        result.error = f"cannot project {workload.strategy} on this target: {error}"
    return result


def _fill(result: Projection, workload: ProjectedWorkload, base: Base, target: Target, options: Options,
          catalogue: Catalogue) -> None:
    per_device, global_batch, notes = batch_for(target, base, options)
    result.per_device_batch, result.global_batch = per_device, global_batch
    base_seconds, base_notes = base_compute_per_sample(base, workload, options, catalogue)
    compute = per_sample_seconds(base_seconds, base, target.device, workload, catalogue)
    result.notes += [*base_notes, *notes, *([compute.note] if compute.note else [])]
    point_c, fast_c, slow_c = (x * per_device for x in (compute.point, compute.fast, compute.slow))
    if base.device is not None:  # the base's own time is the compute's: its measured spread is the band's
        spread = base.spread or Spread(1.0, 1.0, "a published figure states no spread")
        fast_c, slow_c = fast_c / spread.high, slow_c / spread.low
        result.inputs["base_spread"] = Input("base_spread", [round(spread.low, 4), round(spread.high, 4)],
                                             base.kind, spread.how)
    base_batch = base.per_device_batch
    if options.accumulated:
        pass
    elif base_batch and per_device < base_batch:
        slow_c = max(slow_c, compute.slow * base_batch)  # a smaller batch's step takes at most the base's
        result.notes.append(f"per-device batch {per_device} < the base's {base_batch}: time per sample at the "
                            f"smaller batch is not measured; `parbench run --suite ... --filter batch={per_device}` "
                            f"on the base's device would narrow the band")
    elif base_batch and per_device > base_batch:
        fast_c = min(fast_c, compute.fast * per_device)
    links = topology(target.device, target.per_node, target.nodes, options.fabric, catalogue)
    worst_links = worst_case(links, catalogue.nccl.fabric_fraction_low)
    exchange = exchange_seconds(workload.plugin.exchange, workload, per_device, point_c, links, worst_links,
                                options.microbatches)
    serial = target.devices if exchange.serial else 1
    busy = 1.0 / (1.0 - exchange.bubble)
    step = point_c * busy * serial + exchange.point
    fast = fast_c * busy * serial + exchange.best
    slow = slow_c * busy * serial + exchange.worst
    margin = options.host_margin if target.devices > 1 else 0.0
    result.step_s = step
    result.samples_per_s = global_batch / step
    result.per_device_samples_per_s = result.samples_per_s / target.devices
    if workload.tokens_per_sample:
        result.tokens_per_s = result.samples_per_s * workload.tokens_per_sample
    result.band = (0.0 if math.isinf(slow) else global_batch / slow * (1 - margin), global_batch / fast)
    across = target.nodes > 1 and links.node_gbs < links.intra_gbs
    bound, roof_inputs = limited_by(workload, target.device, per_device, compute.bound)
    terms = {bound: point_c * serial, "pipeline bubble": point_c * (busy - 1) * serial,
             ("inter-node exchange" if across else "intra-node exchange"): exchange.point}
    result.terms = {name: seconds for name, seconds in terms.items() if seconds > 0}
    result.limited_by = max(result.terms, key=result.terms.get) if result.terms else bound
    result.inputs.update({i.name: i for i in (*compute.inputs, *roof_inputs)})
    result.inputs["base_samples_per_s"] = Input("base_samples_per_s", base.samples_per_s, base.kind, base.source)
    result.inputs["intra_link_gbs"] = Input("intra_link_gbs", target.device.link_gbs, "catalogued",
                                            target.device.link_source)
    if target.nodes > 1:
        result.inputs["network"] = Input("network_node_gbs", options.fabric.node_gbs, "catalogued",
                                         f"{options.fabric.source} ({options.fabric_said})")
    result.inputs["nccl"] = Input("nccl_latencies", "ring/tree per step", "catalogued", catalogue.nccl.source)
    result.inputs["exchange"] = Input("exchange_model", [t["op"] for t in exchange.terms], "catalogued",
                                      workload.plugin.exchange.source if workload.plugin.exchange else "")
    if margin:
        result.inputs["host_margin"] = Input("host_margin", margin, "assumed",
                                             "what a multi-device step may lose that the model leaves out "
                                             "(--host-margin)")
    _memory(result, workload, base, target)
    _cost(result, workload, target, options)


def _memory(result: Projection, workload: ProjectedWorkload, base: Base, target: Target) -> None:
    memory = memory_per_device(workload, target.device, target.devices, result.per_device_batch or 1, base)
    result.memory_per_device_bytes, result.fits = memory.per_device_bytes, memory.fits
    result.max_batch_per_device = memory.max_batch_per_device
    result.inputs.update({i.name: i for i in memory.inputs if i is not None})
    if memory.note:
        result.notes.append(memory.note)


def _cost(result: Projection, workload: ProjectedWorkload, target: Target, options: Options) -> None:
    if options.prices is None or not result.samples_per_s:
        return
    per_hour, rule = options.prices.per_hour("", "gpu", target.device.name, target.devices, float("nan"))
    result.price_rule = rule
    if per_hour != per_hour:  # NaN: no sourced price
        return
    per_second = per_hour / 3600.0
    result.cost_per_million = per_second / result.samples_per_s * 1e6
    if result.tokens_per_s:
        result.cost_per_million_tokens = per_second / result.tokens_per_s * 1e6
    work = options.samples or (options.tokens / workload.tokens_per_sample
                               if options.tokens and workload.tokens_per_sample else None)
    if work:
        result.cost_of_work = per_second * work / result.samples_per_s


def projections_frame(workload: ProjectedWorkload, base: Base, targets: list[Target], options: Options,
                      catalogue: Catalogue):  # -> pandas.DataFrame
    """One row per target (what a report's "before you rent" view reads): every projection field, the
    band as band_low / band_high, `projected` True on every row, and `inputs` as {name: {value, kind,
    source}}."""
    import pandas as pd

    rows = []
    for target in targets:
        data = project(workload, base, target, options, catalogue).to_dict()
        low, high = data.pop("band") or (None, None)
        rows.append({**data, "band_low": low, "band_high": high, "workload": workload.label})
    return pd.DataFrame(rows)
