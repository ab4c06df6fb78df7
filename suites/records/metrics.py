"""Derived metrics of a run: the registry's metrics (suites.records.metric_registry) of one measurement.
Computed from the measurement, never stored alone."""
from __future__ import annotations

from pathlib import Path

from suites.cases.case import Case
from suites.hardware.devices import discover
from suites.records.measurement import Measurement
from suites.records.metric_registry import METRICS, Work
from suites.hardware.peaks import PeakTable, measured_bandwidth, measured_peak


#: The `Work` inputs the case alone fixes (`case_work`): the same at run time and in the report.
CASE_WORK = ("flops_per_step", "samples_per_step", "tokens_per_step", "bytes_per_step", "state_bytes_per_device",
             "activation_bytes_per_device", "pipeline_bubble", "min_bytes_per_step")


def case_work(case: Case) -> dict[str, float | None]:
    """The analytic work of one step of `case` and its estimates, keyed like `Work` (None where
    the case has none). Raises UnknownWorkload (a KeyError) or ValueError where this process
    cannot know them: a workload, model or strategy not registered here."""
    from suites.strategies.jobs import job_for  # the case's job, built once (cached)

    job = job_for(case)
    workload, plugin, state = job.workload, job.strategy, job.state_estimate() or {}
    # A strategy with the `PipelineBubble` capability (`suites.run.capabilities`), found by
    # its member's name as `isinstance` would: this layer sits below the strategies.
    bubble = getattr(plugin, "bubble_fraction", None)
    values = (workload.flops_per_step() or None, workload.samples_per_step() or None,
              workload.tokens_per_step() or None, workload.bytes_per_step() or None, state.get("total"),
              state.get("activations"), bubble(job) if bubble else None,
              workload.min_bytes_per_step() or None)
    return dict(zip(CASE_WORK, values))


def derive(case: Case, measurement: Measurement, results_dir: Path, machine: str,
           peaks: PeakTable) -> dict[str, float | None]:
    """Every registry metric that applies to the case (None where it applies but cannot be known)."""
    counts = case_work(case)
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
    emulated = _emulated(case)
    work = Work(median_s=measurement.median, n_devices=case.n_devices, emulated=emulated, **counts,
                sustained_step_s=measurement.sustained_step_s or None,
                exchange_share=measurement.exchange_share,
                peak_memory_bytes=measurement.peak_memory_bytes,
                peak_reserved_bytes=measurement.peak_reserved_bytes,
                training_state_bytes=measurement.training_state_bytes,
                peak_memory_total_bytes=measurement.peak_memory_total_bytes,
                peak_table_tflops=table_peak, peak_measured_tflops=own_peak,
                roof_peak_tflops=table_peak or own_peak, roof_bandwidth_gbs=bandwidth,
                energy_joules_per_step=energy.joules_per_step if energy else None,
                energy_watts=energy.watts if energy else None,
                compile_s=measurement.compile_s, recompiles=measurement.recompiles)
    return {name: metric.compute(work) for name, metric in METRICS.items() if metric.applies(work)}


def _emulated(case: Case) -> bool:
    """Whether the case ran on emulated devices; False where its framework has no such strategy."""
    from suites.strategies.jobs import job_for
    from suites.strategies.registry import NoSuchStrategy

    try:
        return job_for(case).emulated
    except NoSuchStrategy:
        return False
