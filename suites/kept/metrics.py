"""Derived metrics of a run: the registry's metrics (suites.kept.metric_registry) of one measurement.
Computed from the measurement, never stored alone."""
from __future__ import annotations

from pathlib import Path

from suites.cases.case import Case
from suites.cases.strategy_plugins import plugin_for
from suites.kept.devices import discover
from suites.kept.measurement import Measurement
from suites.kept.metric_registry import METRICS, Work
from suites.kept.peaks import PeakTable, measured_peak
from suites.workloads import workload_of


def derive(case: Case, measurement: Measurement, results_dir: Path, machine: str,
           peaks: PeakTable) -> dict[str, float | None]:
    """Every registry metric that applies to the case (None where it applies but cannot be known)."""
    workload = workload_of(case)
    flops = workload.flops_per_step() or None
    table_peak = own_peak = None
    if flops:  # looking peaks up discovers the device: only where there is a FLOP count to compare
        device = discover(case.framework, case.device)
        # tf32 cases are compared with the tf32 peak; everything else with its own dtype.
        table_peak = peaks.peak_tflops(device, case.precision)
        own_peak = measured_peak(results_dir, machine, device, case.precision)
    state = workload.state_estimate() or {}
    work = Work(median_s=measurement.median, n_devices=case.n_devices, flops_per_step=flops,
                samples_per_step=workload.samples_per_step() or None,
                bytes_per_step=workload.bytes_per_step() or None,
                sustained_step_s=measurement.sustained_step_s or None,
                exchange_share=measurement.exchange_share,
                peak_memory_bytes=measurement.peak_memory_bytes,
                peak_reserved_bytes=measurement.peak_reserved_bytes,
                training_state_bytes=measurement.training_state_bytes,
                peak_memory_total_bytes=measurement.peak_memory_total_bytes,
                peak_table_tflops=table_peak, peak_measured_tflops=own_peak,
                state_bytes_per_device=state.get("total"),
                activation_bytes_per_device=state.get("activations"),
                pipeline_bubble=plugin_for(case).bubble_fraction(case))
    return {name: metric.compute(work) for name, metric in METRICS.items() if metric.applies(work)}
