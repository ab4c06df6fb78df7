"""One device's compute time per sample on a target board, from the base.

- Same board as the base: the base's own time per sample (its exchange taken out by the caller).
- Another catalogued board: the base's time split by how close it ran to its board's sustained GEMM
  rate. share = (FLOP/s the base achieved / its peak) / its GEMM fraction: that share of the time runs
  at the GEMM rate and scales with the sustained peaks; the rest is memory traffic and scales with
  the memory bandwidths. The band spans the two pure scalings. A base at under 1% of its peak is
  host/launch-bound: its time does not change with the board.
- A base on no catalogued board (a CPU record): its efficiency says nothing of a GPU's; the target's
  catalogued measurement of the model (`[[measured]]`) gives the time, scaled by FLOPs per sample;
  where there is none, the GEMM rate gives only a bound (the band goes down to zero throughput).
"""
from __future__ import annotations

from dataclasses import dataclass

from suites.predict.base import Base
from suites.predict.catalogue import Catalogue, DeviceType
from suites.predict.inputs import Input
from suites.predict.workload import ProjectedWorkload

#: Below this share of its peak a step is taken as host/launch-bound (assumed: a step that far from
#: any roof waits on the host; a roofline has nothing to scale).
HOST_BOUND_FRACTION = 0.01
#: The spread of one catalogued measurement of a model taken for another implementation's (assumed).
MEASURED_ROW_SPREAD = 0.15


@dataclass(frozen=True)
class ComputeEstimate:
    """Seconds per sample on one device: `point`, and `fast`..`slow` (the band); `bound` what limits it."""

    point: float
    fast: float
    slow: float
    bound: str
    inputs: tuple[Input, ...]
    note: str = ""


def per_sample_seconds(base_seconds: float, base: Base, device: DeviceType, workload: ProjectedWorkload,
                       catalogue: Catalogue) -> ComputeEstimate:
    """`base_seconds`: the base's compute seconds per sample on one of its devices."""
    precision = str(workload.precision)
    if base.device == device:
        share = achieved_share(base_seconds, device, workload)
        bound = "host/launch" if share < HOST_BOUND_FRACTION else "compute" if share >= 0.5 else "memory bandwidth"
        return ComputeEstimate(base_seconds, base_seconds, base_seconds, bound,
                               (Input("compute_per_sample_s", base_seconds, base.kind, base.source),))
    if base.device is not None:
        return across_boards(base_seconds, base, device, workload)
    row = catalogue.measured_for(device, workload.model, precision)
    if row is not None:
        row_flops = 3.0 * type(workload.spec)().forward_flops_per_sample()
        seconds = (1.0 / row.samples_per_s) * workload.flops_per_sample / row_flops
        source = f"{catalogue.path} [[measured]] {row.device} {row.model} {row.precision}: {row.source}"
        return ComputeEstimate(seconds, seconds * (1 - MEASURED_ROW_SPREAD), seconds * (1 + MEASURED_ROW_SPREAD),
                               "compute", (Input("compute_per_sample_s", seconds, "catalogued", source),
                                           Input("measured_row_spread", MEASURED_ROW_SPREAD, "assumed",
                                                 "one run of the model on the board, maybe another implementation")),
                               note=f"the base ran on {base.device_name}, not a catalogued board: the compute is "
                                    f"{device.label}'s catalogued measurement of {workload.model}")
    rate = device.peak_tflops[precision] * 1e12 * device.gemm_fraction
    seconds = workload.flops_per_sample / rate
    return ComputeEstimate(seconds, seconds, float("inf"), "compute (upper bound)",
                           (Input("gemm_fraction", device.gemm_fraction, _kind(device), device.gemm_source),
                            Input("peak_tflops", device.peak_tflops[precision], "catalogued", device.peaks_source)),
                           note=f"no measurement of {workload.model} on {device.label} and the base's board is not "
                                "catalogued: the sustained GEMM rate bounds the speed; run one step on the board "
                                "to narrow it")


def achieved_share(seconds_per_sample: float, device: DeviceType, workload: ProjectedWorkload) -> float:
    """The share of `device`'s peak in the workload's precision a step at this time per sample reaches."""
    return workload.flops_per_sample / seconds_per_sample / (device.peak_tflops[str(workload.precision)] * 1e12)


def across_boards(base_seconds: float, base: Base, device: DeviceType, workload: ProjectedWorkload) -> ComputeEstimate:
    precision = str(workload.precision)
    origin = base.device
    assert origin is not None
    compute_ratio = (origin.peak_tflops[precision] * origin.gemm_fraction) / (
        device.peak_tflops[precision] * device.gemm_fraction)
    memory_ratio = origin.bandwidth_gbs / device.bandwidth_gbs
    fraction = achieved_share(base_seconds, origin, workload)
    inputs = (Input("compute_per_sample_s", base_seconds, base.kind, base.source),
              Input("base_peak_tflops", origin.peak_tflops[precision], "catalogued", origin.peaks_source),
              Input("target_peak_tflops", device.peak_tflops[precision], "catalogued", device.peaks_source),
              Input("base_gemm_fraction", origin.gemm_fraction, _kind(origin), origin.gemm_source),
              Input("target_gemm_fraction", device.gemm_fraction, _kind(device), device.gemm_source),
              Input("base_bandwidth_gbs", origin.bandwidth_gbs, "catalogued", origin.peaks_source),
              Input("target_bandwidth_gbs", device.bandwidth_gbs, "catalogued", device.peaks_source))
    if fraction < HOST_BOUND_FRACTION:
        low, high = min(1.0, compute_ratio, memory_ratio), max(1.0, compute_ratio, memory_ratio)
        return ComputeEstimate(base_seconds, base_seconds * low, base_seconds * high, "host/launch", inputs,
                               note=f"the base reached {100 * fraction:.2f}% of its peak: host/launch-bound, "
                                    "kept as is")
    share = min(1.0, fraction / origin.gemm_fraction)
    ratio = share * compute_ratio + (1 - share) * memory_ratio
    bound = "compute" if share >= 0.5 else "memory bandwidth"
    return ComputeEstimate(base_seconds * ratio, base_seconds * min(compute_ratio, memory_ratio),
                           base_seconds * max(compute_ratio, memory_ratio), bound,
                           (*inputs, Input("compute_share", round(share, 4), "measured",
                                           "the base's FLOP/s over its board's sustained GEMM rate")))


def _kind(device: DeviceType) -> str:
    return "catalogued" if device.gemm_kind == "measured" else "assumed"
