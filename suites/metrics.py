"""Derived metrics, with their formulas. Computed from the measurement, never stored alone."""
from __future__ import annotations

from pathlib import Path

from .case import Case
from .devices import discover
from .measurement import Measurement
from .peaks import PeakTable, measured_peak
from .workloads import workload_of

FORMULAS = {
    "tflops": "analytic FLOP per step / median step time / 1e12 (matmul 2MNK; conv 2*N*Hout*Wout*Cout*Kh*Kw*Cin; training step 3x forward)",
    "samples_per_s": "samples per step (all devices) / median step time",
    "samples_per_s_sustained": "samples per step (all devices) x steps timed / seconds timed (what a long run sustains)",
    "pct_peak_table": "100 * tflops / (n_devices * peak of one device in this precision, peaks.toml)",
    "pct_peak_measured": "100 * tflops / (n_devices * this machine's calibrated peak, `parbench calibrate`)",
    "algbw_gbs": "bytes reduced / median time / 1e9",
    "busbw_gbs": "algbw * 2(n-1)/n  (nccl-tests' bus bandwidth for all-reduce)",
    "exchange_share": "1 - slowest rank's step without the gradient all-reduce (DDP no_sync) / median step time",
}


def derive(case: Case, measurement: Measurement, results_dir: Path, machine: str,
           peaks: PeakTable) -> dict[str, float | None]:
    workload = workload_of(case)
    t = measurement.median
    metrics: dict[str, float | None] = {}
    flops = workload.flops_per_step()
    if flops:
        metrics["tflops"] = flops / t / 1e12
        device = discover(case.framework, case.device)
        # tf32 cases are compared with the tf32 peak; everything else with its own dtype.
        table_peak = peaks.peak_tflops(device, case.precision)
        metrics["pct_peak_table"] = (100 * metrics["tflops"] / (table_peak * case.n_devices)
                                     if table_peak else None)
        own_peak = measured_peak(results_dir, machine, device, case.precision)
        metrics["pct_peak_measured"] = (100 * metrics["tflops"] / (own_peak * case.n_devices)
                                        if own_peak else None)
    samples = workload.samples_per_step()
    if samples:
        metrics["samples_per_s"] = samples / t
        if measurement.sustained_step_s:
            metrics["samples_per_s_sustained"] = samples / measurement.sustained_step_s
    if measurement.exchange_share is not None:
        metrics["exchange_share"] = measurement.exchange_share
    size = workload.bytes_per_step()
    if size:
        algbw = size / t / 1e9
        metrics["algbw_gbs"] = algbw
        n = case.n_devices
        metrics["busbw_gbs"] = algbw * 2 * (n - 1) / n
    return metrics
