"""Whether a device's compute on the target is limited by its arithmetic or its memory bandwidth: the
roofline of the workload's own arithmetic intensity against the target's ridge point.

intensity = FLOPs of one device's step / the bytes that step moves at the least, both from the spec, for
the whole model at the per-device batch b (a data-parallel device's step; a model split over devices keeps
about the same ratio):
- FLOPs: b x the workload's training FLOPs per sample (3 x the forward's);
- activations: every byte a sample holds (the spec's analytic count, `memory.analytic_activation_bytes`)
  is written in the forward and read in the backward, and its gradient written and read once:
  4 x that x b;
- weights: read twice in the compute dtype (forward, backward), and the optimizer's update reads and
  writes the fp32 training state (parameters, gradients, its states): 2 x parameters x compute bytes
  + 2 x state bytes.
ridge = the target's dense peak in the precision / its memory bandwidth (peaks.toml, through the
catalogue). At or above the ridge the step is "compute"-limited, below it "memory bandwidth"-limited.

It is a bound on traffic, so the intensity is an upper bound: a step below the ridge even so is
memory-bound; one above it is compute-bound by the roofline, however far below its peak it runs (the
achieved share of the peak is the speed's input, not the label's). A base that reaches under 1% of its
peak (host/launch) and a speed bounded only by the GEMM rate keep their own label; a workload whose spec
has no analytic count keeps the label from its achieved share (`compute.per_sample_seconds`).
"""
from __future__ import annotations

from dataclasses import dataclass

from suites.predict.catalogue import DeviceType
from suites.predict.inputs import Input
from suites.predict.memory import analytic_activation_bytes
from suites.predict.workload import ProjectedWorkload
from suites.strategies.base import STATE_BYTES
from suites.workloads.collectives import DTYPE_BYTES

#: Each activation byte is written (forward) and read (backward), and so is its gradient.
ACTIVATION_PASSES = 4
#: Labels decided from other evidence than the workload's intensity.
KEPT = ("host/launch", "compute (upper bound)")


@dataclass(frozen=True)
class Roofline:
    flops_per_step: float
    bytes_per_step: float
    ridge: float

    @property
    def intensity(self) -> float:
        return self.flops_per_step / self.bytes_per_step

    @property
    def bound(self) -> str:
        return "compute" if self.intensity >= self.ridge else "memory bandwidth"


def roofline(workload: ProjectedWorkload, device: DeviceType, per_device_batch: int) -> Roofline | None:
    """The workload's step at `per_device_batch` on `device`; None where its spec has no analytic count."""
    activations = analytic_activation_bytes(workload)
    if activations is None:
        return None
    compute_bytes = DTYPE_BYTES[workload.precision]
    state = STATE_BYTES * workload.parameters * (2 + workload.optimizer_states)
    moved = (ACTIVATION_PASSES * activations * per_device_batch
             + 2 * workload.parameters * compute_bytes + 2 * state)
    precision = str(workload.precision)
    ridge = device.peak_tflops[precision] * 1e12 / (device.bandwidth_gbs * 1e9)
    return Roofline(workload.flops_per_sample * per_device_batch, moved, ridge)


def limited_by(workload: ProjectedWorkload, device: DeviceType, per_device_batch: int,
               share_bound: str) -> tuple[str, tuple[Input, ...]]:
    """What limits the compute on `device`, and the inputs it was decided from. `share_bound` is the
    label from the base's achieved share of its peak: kept for host/launch, a GEMM-rate bound, and a
    spec without an analytic count."""
    roof = None if share_bound in KEPT else roofline(workload, device, per_device_batch)
    if roof is None:
        return share_bound, ()
    return roof.bound, (
        Input("arithmetic_intensity", round(roof.intensity, 1), "estimated",
              f"estimated (analytic): {roof.flops_per_step:.4g} FLOPs / {roof.bytes_per_step:.4g} bytes a step "
              f"at batch {per_device_batch} (activations written, read and their gradients written and read "
              "once; weights read twice in the compute dtype; the optimizer's fp32 state read and written)"),
        Input("ridge_flop_per_byte", round(roof.ridge, 1), "catalogued",
              f"{device.label}: {device.peak_tflops[str(workload.precision)]:g} TFLOP/s "
              f"{workload.precision} / {device.bandwidth_gbs:g} GB/s ({device.peaks_source})"))
