"""The tidy table's columns of what limits a figure: the record's `bound_by` verdict and the GPU
telemetry behind it (`suites.records.bound_by`, `suites.records.gpu_telemetry`). One group, apart from the
other columns; rows of sources that store neither (asv, pytest-benchmark, older records) leave
them empty."""
from __future__ import annotations

from statistics import median
from typing import Any

from suites.records.record import Record

LIMIT_COLUMNS: dict[str, str] = {
    "bound_by": "what limits the figure: compute, memory, power, launch, communication or unknown "
                "(suites.records.bound_by); '' where the record has no verdict",
    "bound_by_reason": "why that verdict, in one sentence (or why none could be given)",
    "gpu_sm_clock_mhz": "GPU rows: median SM clock over the timed blocks, MHz (median over the case's GPUs)",
    "gpu_max_sm_clock_mhz": "GPU rows: the SM clock the GPU may reach at most, MHz (NVML)",
    "gpu_power_w": "GPU rows: median board power over the timed blocks, W (median over the case's GPUs)",
    "gpu_power_limit_w": "GPU rows: the power limit in force, W (NVML)",
    "gpu_temperature_c": "GPU rows: highest temperature over the timed blocks, °C",
    "gpu_clock_events": "GPU rows: NVML clock-event (throttle) reasons seen over the timed blocks, e.g. sw_power_cap",
    "device_busy_share": "share of the step the device was busy: profiler kernel time / median step, else NVML "
                         "utilization; 0-1",
    "burst_gain": "first timed block's speed over the median's − 1, where beyond the spread (a GPU's burst "
                  "before it settles at its power limit)",
}
LIMIT_FLOATS = ["gpu_sm_clock_mhz", "gpu_max_sm_clock_mhz", "gpu_power_w", "gpu_power_limit_w",
                "gpu_temperature_c", "device_busy_share", "burst_gain"]


def _median_of(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return median(known) if known else None


def limit_fields(record: Record) -> dict[str, Any]:
    """The row's limit columns from one record."""
    bound = record.bound_by
    m = record.measurement
    telemetry = m.telemetry if m else None
    gpus = telemetry.gpus if telemetry else ()
    evidence = bound.evidence if bound else {}
    temperatures = [gpu.temperature_c.max for gpu in gpus if gpu.temperature_c]
    return {
        "bound_by": bound.verdict if bound else "", "bound_by_reason": bound.reason if bound else "",
        "gpu_sm_clock_mhz": _median_of([gpu.sm_clock_mhz.median if gpu.sm_clock_mhz else None for gpu in gpus]),
        "gpu_max_sm_clock_mhz": _median_of([gpu.max_sm_clock_mhz for gpu in gpus]),
        "gpu_power_w": _median_of([gpu.power_w.median if gpu.power_w else None for gpu in gpus]),
        "gpu_power_limit_w": _median_of([gpu.power_limit_w for gpu in gpus]),
        "gpu_temperature_c": max(temperatures) if temperatures else None,
        "gpu_clock_events": ", ".join(sorted({reason for gpu in gpus for reason in gpu.reasons})),
        "device_busy_share": evidence.get("busy_share"),
        "burst_gain": m.burst_gain if m else None,
    }
