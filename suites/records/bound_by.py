"""What limits a case's figure: one `BoundBy` verdict per ok record, with the evidence it rests on.

The verdicts, tried in this order (the first whose evidence holds wins):
- ``communication``: the cross-rank exchange takes most of the step (DDP's no_sync probe,
  `Measurement.exchange_share` >= `EXCHANGE_SHARE`).
- ``launch``: the device ran kernels for a small share of the step (< `BUSY_SHARE`): the step
  measures the host launching work, not the device. From the profiler's kernel time per step,
  else NVML's utilization (coarser: one kernel per sample period reads as busy). Not for an
  emulated GPU case (ranks sharing fewer GPUs over gloo): its idle device waits on the other
  ranks' turns and gloo's copies through the host, so it is ``unknown``, said why.
- ``power``: the GPU's clocks were held below their maximum (< `CLOCK_SHARE`) with a power or
  thermal clock-event reason seen (NVML: sw_power_cap, hw_slowdown, ...).
- ``compute`` / ``memory``: near (>= `NEAR_ROOF` of) the roofline's bound at the case's
  arithmetic intensity, the compute roof scaled to the SM clock the GPU actually ran at
  (table peak x median SM clock / the clock the peak assumes: its peaks.toml row's `clock_mhz`,
  else NVML's max SM clock); which roof by the side of the ridge point the
  intensity is on. A case without a byte count (training steps) is `compute` when near the
  clock-scaled peak.
- ``unknown``, with the reason: none of the above holds, or the evidence is missing.

No verdict says ``input``: every workload feeds batches already on its device, so no input
pipeline is timed; a step bound by its host is ``launch`` (on a GPU) or, on a CPU, shows as
``unknown`` far below its roof.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from suites.cases.case import Case
from suites.records.measurement import Measurement
from suites.records.gpu_telemetry import GpuTelemetry

Verdict = Literal["compute", "memory", "power", "launch", "communication", "unknown"]
VERDICTS: tuple[Verdict, ...] = ("compute", "memory", "power", "launch", "communication", "unknown")

#: Share of the global step beyond the slowest rank's own compute above which the exchange bounds it.
EXCHANGE_SHARE = 0.5
#: Device busy share of a step below which the step is launch-bound.
BUSY_SHARE = 0.5
#: Median SM clock / max below which a power or thermal reason means the clocks were capped.
CLOCK_SHARE = 0.95
#: Share of the roofline bound (or of the clock-scaled peak) from which a case is near the roof.
NEAR_ROOF = 0.6

Evidence = dict[str, Any]


@dataclass(frozen=True)
class BoundBy:
    verdict: Verdict
    #: One sentence: why this verdict (or why none could be given).
    reason: str
    #: The figures the verdict rests on, by name.
    evidence: Evidence = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reason": self.reason, "evidence": dict(self.evidence)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BoundBy":
        return cls(data["verdict"], str(data.get("reason", "")), dict(data.get("evidence") or {}))


@dataclass(frozen=True)
class Signals:
    """What a record tells about its limits, gathered from its measurement and metrics."""

    device: str
    n_devices: int
    median_s: float
    tflops: float | None = None
    #: tflops / (n_devices x one device's peak in the case's precision): the table's, else the calibrated.
    peak_fraction: float | None = None
    arithmetic_intensity: float | None = None
    roof_peak_tflops: float | None = None
    roof_bandwidth_gbs: float | None = None
    exchange_share: float | None = None
    kernel_s_per_step: float | None = None
    gpus: Sequence[GpuTelemetry] = ()
    #: The SM clock the GPU's peak assumes (peaks.toml `clock_mhz`); None: NVML's max SM clock.
    peak_clock_mhz: float | None = None
    #: The case's devices were emulated (ranks or logical devices sharing fewer devices).
    emulated: bool = False


def _pct(fraction: float) -> str:
    """0.62 -> '62%', 0.0021 -> '0.21%': a small share keeps two significant digits."""
    return f"{fraction:.0%}" if fraction >= 0.1 else f"{100 * fraction:.2g}%"


def _median(values: Sequence[float | None]) -> float | None:
    known = sorted(value for value in values if value is not None)
    return known[len(known) // 2] if known else None


def _clock_share(signals: Signals) -> float | None:
    """The lowest median SM clock / the clock the peak assumes over the case's GPUs (the slowest
    sets the step): the peaks table's clock, else NVML's max SM clock (`GpuTelemetry.sm_clock_share`)."""
    if signals.peak_clock_mhz:
        shares = [gpu.sm_clock_mhz.median / signals.peak_clock_mhz for gpu in signals.gpus if gpu.sm_clock_mhz]
    else:
        shares = [gpu.sm_clock_share for gpu in signals.gpus if gpu.sm_clock_share is not None]
    return min(shares) if shares else None


def _gpu_evidence(signals: Signals) -> Evidence:
    gpus = signals.gpus
    evidence: Evidence = {}
    if not gpus:
        return evidence
    clocks = _median([gpu.sm_clock_mhz.median if gpu.sm_clock_mhz else None for gpu in gpus])
    power = _median([gpu.power_w.median if gpu.power_w else None for gpu in gpus])
    figures = {"sm_clock_mhz": clocks, "max_sm_clock_mhz": _median([gpu.max_sm_clock_mhz for gpu in gpus]),
               "power_w": power, "power_limit_w": _median([gpu.power_limit_w for gpu in gpus]),
               "utilization_pct": _median([gpu.utilization_pct.median if gpu.utilization_pct else None
                                           for gpu in gpus])}
    evidence.update({name: value for name, value in figures.items() if value is not None})
    if signals.peak_clock_mhz:
        evidence["peak_clock_mhz"] = signals.peak_clock_mhz  # what the clock share is of
    reasons = sorted({reason for gpu in gpus for reason in gpu.reasons})
    if reasons:
        evidence["clock_events"] = reasons
    return evidence


def busy_share(signals: Signals) -> tuple[float | None, str]:
    """The device's busy share of a step and where it comes from: the profiler's kernel time,
    else NVML's median utilization; (None, "") where neither was measured."""
    if signals.kernel_s_per_step and signals.median_s > 0:  # 0: no kernels recorded, no evidence
        return min(1.0, signals.kernel_s_per_step / signals.median_s), "profiler kernel time / median step"
    utilization = _median([gpu.utilization_pct.median if gpu.utilization_pct else None for gpu in signals.gpus])
    if utilization is not None:
        return utilization / 100.0, "NVML utilization (median)"
    return None, ""


def diagnose(signals: Signals) -> BoundBy:
    """The verdict of one case (see the module's docstring for the rules)."""
    evidence = _gpu_evidence(signals)
    if signals.exchange_share is not None:
        evidence["exchange_share"] = signals.exchange_share
        if signals.exchange_share >= EXCHANGE_SHARE:
            return BoundBy("communication", f"the cross-rank exchange takes {_pct(signals.exchange_share)} of the "
                           "step (the slowest rank's no_sync step explains the rest)", evidence)
    busy, source = busy_share(signals)
    if busy is not None:
        evidence.update(busy_share=busy, busy_share_from=source)
        if busy < BUSY_SHARE and signals.emulated:
            evidence["emulated"] = True
            return BoundBy("unknown", f"the {signals.device} was busy {_pct(busy)} of the step ({source}), but its "
                           f"{signals.n_devices} devices were emulated (ranks sharing fewer GPUs, exchanging over "
                           "gloo through the host): the idle share is their turns and gloo's copies, not launching",
                           evidence)
        if busy < BUSY_SHARE:
            return BoundBy("launch", f"the {signals.device} was busy {_pct(busy)} of the step ({source}): "
                           "this figure measures the host launching work, not the device", evidence)
    clock_share = _clock_share(signals)
    limits = sorted({reason for gpu in signals.gpus for reason in gpu.limited_by})
    if clock_share is not None:
        evidence["sm_clock_share"] = clock_share
        if limits and clock_share < CLOCK_SHARE:
            of = "the clock its peak assumes" if signals.peak_clock_mhz else "their maximum"
            return BoundBy("power", f"clocks held at {_pct(clock_share)} of {of} with "
                           f"{', '.join(limits)} seen: the {signals.device} ran into its power or thermal limit",
                           evidence)
    return _roofline(signals, clock_share or 1.0, evidence)


def _roofline(signals: Signals, clock_share: float, evidence: Evidence) -> BoundBy:
    """compute / memory from the roofline (or the peak), at the clock the device ran at."""
    if signals.tflops is None:
        return BoundBy("unknown", "the case counts no FLOP: no roofline or peak to compare with", evidence)
    evidence["tflops"] = signals.tflops
    at_clock = " at the clock it ran" if clock_share < 1.0 else ""
    roofs = (signals.arithmetic_intensity, signals.roof_peak_tflops, signals.roof_bandwidth_gbs)
    if None not in roofs:
        intensity, peak, bandwidth = roofs  # type: ignore[misc]
        peak *= clock_share
        ridge = peak * 1000.0 / bandwidth
        side: Verdict = "memory" if intensity < ridge else "compute"
        bound = min(peak, intensity * bandwidth / 1000.0) * signals.n_devices
        fraction = signals.tflops / bound
        evidence.update(arithmetic_intensity=intensity, ridge_flop_per_byte=ridge,
                        roof_peak_tflops_at_clock=peak, roof_bandwidth_gbs=bandwidth, roofline_fraction=fraction)
        roof = "bandwidth roof" if side == "memory" else f"compute roof{at_clock}"
        where = f"{intensity:.3g} FLOP/B, {'left' if side == 'memory' else 'right'} of the ridge at {ridge:.3g}"
        if fraction >= NEAR_ROOF:
            return BoundBy(side, f"at {_pct(fraction)} of the {roof} ({where})", evidence)
        return BoundBy("unknown", f"at {_pct(fraction)} of the {roof} ({where}): not near it, and no other limit "
                       "was measured", evidence)
    if signals.peak_fraction is None:
        return BoundBy("unknown", f"no peak for this {signals.device} and precision (peaks.toml, `parbench "
                       "calibrate`) to compare with", evidence)
    fraction = signals.peak_fraction / clock_share
    evidence["peak_fraction_at_clock"] = fraction
    if fraction >= NEAR_ROOF:
        return BoundBy("compute", f"at {_pct(fraction)} of the peak{at_clock}", evidence)
    no_roofline = ("no memory bandwidth known for a roofline (`parbench calibrate` measures it)"
                   if signals.arithmetic_intensity is not None else "no byte count for a roofline")
    return BoundBy("unknown", f"at {_pct(fraction)} of the peak{at_clock}, {no_roofline}, and no other limit "
                   "was measured", evidence)


def signals_of(case: Case, measurement: Measurement, metrics: dict[str, float | None],
               emulated: bool = False) -> Signals:
    """A record's signals: its measurement's telemetry and exchange share, its derived metrics,
    whether its devices were `emulated`."""
    pct = metrics.get("pct_peak_table") or metrics.get("pct_peak_measured")
    telemetry = measurement.telemetry
    gpus = telemetry.gpus if telemetry else ()
    return Signals(device=str(case.device), n_devices=case.n_devices, median_s=measurement.median,
                   tflops=metrics.get("tflops"), peak_fraction=None if pct is None else pct / 100.0,
                   arithmetic_intensity=metrics.get("arithmetic_intensity"),
                   roof_peak_tflops=metrics.get("roof_peak_tflops"),
                   roof_bandwidth_gbs=metrics.get("roof_bandwidth_gbs"),
                   exchange_share=measurement.exchange_share,
                   kernel_s_per_step=telemetry.kernel_s_per_step if telemetry else None,
                   gpus=gpus, peak_clock_mhz=peak_clock_mhz(case) if gpus else None, emulated=emulated)


def peak_clock_mhz(case: Case) -> float | None:
    """The SM clock the peak of the case's GPU assumes (`PeakTable.clock_mhz`), or None."""
    from suites.hardware.devices import discover
    from suites.hardware.peaks import PeakTable

    return PeakTable.load().clock_mhz(discover(case.framework, case.device))
