"""Derived metrics of a run: the registry's metrics (suites.records.metric_registry) of one measurement.
Computed from the measurement, never stored alone."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from suites.cases.case import Case
from suites.hardware.devices import discover
from suites.records.measurement import Measurement
from suites.records.memory_breakdown import ESTIMATED, MemoryExplanation, explain
from suites.records.metric_registry import ABOVE_PEAK, METRICS, PCT_OF_PEAK, Work, physical_devices, tflops
from suites.hardware.peaks import PeakTable, measured_bandwidth, measured_peak


#: The `Work` inputs the case alone fixes: its analytic work of one step and its estimates
#: (`suites.strategies.jobs.Job.work`), the same at run time and in the report. Computed from the
#: case's job by the caller and passed in: what reads records needs none of the code that ran them.
CASE_WORK = ("flops_per_step", "samples_per_step", "tokens_per_step", "bytes_per_step", "state_bytes_per_device",
             "activation_bytes_per_device", "pipeline_bubble", "min_bytes_per_step", "parameter_bytes_per_device",
             "gradient_bytes_per_device", "optimizer_bytes_per_device")


def memory_explanation(measurement: Measurement, counts: Mapping[str, float | None]) -> MemoryExplanation | None:
    """The measurement's peak by category (`suites.records.memory_breakdown.explain`) beside the
    case's estimates (`counts`, keyed by `CASE_WORK`); None without a breakdown."""
    return explain(measurement.memory_breakdown, measurement.memory,
                   {category: counts.get(name) for category, name in ESTIMATED.items()})


def derive(case: Case, measurement: Measurement, results_dir: Path, machine: str, peaks: PeakTable,
           counts: Mapping[str, float | None], emulated: bool) -> dict[str, float | bool | None]:
    """Every registry metric that applies to the case (None where it applies but cannot be known),
    from its measurement, its analytic work (`counts`, keyed by `CASE_WORK`) and whether it ran
    on emulated devices. Beside them, where the case has a FLOP count and a peak, the flag
    `above_peak` (`suites.records.metric_registry.FLAGS`): its TFLOP/s per physical device is above
    the table's or the calibrated peak; the roofline's roof is then that figure."""
    flops = counts["flops_per_step"]
    table_peak = own_peak = bandwidth = None
    if flops:  # looking peaks up discovers the device: only where there is a FLOP count to compare
        device = discover(case.framework, case.device)
        # tf32 cases are compared with the tf32 peak; everything else with its own dtype.
        table_peak = peaks.peak_tflops(device, case.precision)
        own_peak = measured_peak(results_dir, machine, device, case.precision)
        if counts["min_bytes_per_step"]:
            bandwidth = measured_bandwidth(results_dir, machine, device) or peaks.bandwidth_gbs(device)
    energy = measurement.energy
    per_device = None
    if flops and measurement.median > 0:
        step = Work(measurement.median, case.n_devices, emulated, flops)
        per_device = tflops(step) / physical_devices(step)
    roof = table_peak or own_peak
    if roof and per_device and per_device > roof:
        roof = per_device  # a figure above a peak replaces that peak for this record's roofline (flagged)
    work = Work(median_s=measurement.median, n_devices=case.n_devices, emulated=emulated,
                **{name: counts.get(name) for name in CASE_WORK},
                sustained_step_s=measurement.sustained_step_s or None,
                exchange_share=measurement.exchange_share,
                peak_memory_bytes=measurement.peak_memory_bytes,
                peak_reserved_bytes=measurement.peak_reserved_bytes,
                training_state_bytes=measurement.training_state_bytes,
                peak_memory_total_bytes=measurement.peak_memory_total_bytes,
                memory_explained=memory_explanation(measurement, counts),
                peak_table_tflops=table_peak, peak_measured_tflops=own_peak,
                roof_peak_tflops=roof, roof_bandwidth_gbs=bandwidth,
                energy_joules_per_step=energy.joules_per_step if energy else None,
                energy_watts=energy.watts if energy else None,
                compile_s=measurement.compile_s, recompiles=measurement.recompiles)
    metrics: dict[str, float | bool | None] = {
        name: metric.compute(work) for name, metric in METRICS.items() if metric.applies(work)}
    peaks_compared = [peak for peak in (table_peak, own_peak) if peak]
    if per_device is not None and peaks_compared:
        # A peak is an upper bound: a figure above one means the peak is wrong. The % of peak
        # keeps the true figure (over 100), flagged; suites.runner.recording says which in details.
        metrics[ABOVE_PEAK] = (any(per_device > peak for peak in peaks_compared)
                               or any((metrics.get(name) or 0) > 100 for name in PCT_OF_PEAK))
    return metrics

