"""What a case's GPUs did while its timed blocks ran: clocks, power, temperature, utilization and
the clock-event (throttle) reasons NVML reported, one `GpuTelemetry` per GPU; and how busy the
device was within a step (`kernel_s_per_step`: device kernel time per step from the profiler).

Readings are sampled on a thread every `suites.measure.telemetry_sampler.SAMPLE_INTERVAL_S` through the timed
blocks and kept as min / median / max (`Spread`). A clock-event reason counts as seen when any
sample had it. Where nothing could be read `reason` says why (a CPU case, NVML missing).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

#: NVML's clock-event reasons (`nvmlClocksEventReason*`, formerly `nvmlClocksThrottleReason*`):
#: bit -> the name a record stores. nvidia-smi prints the same mask as `clocks_event_reasons`.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clock_setting",
}
#: The reasons that mean the clocks were held down by power or heat (not idleness or a setting).
LIMITING_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})


def reason_names(mask: int) -> tuple[str, ...]:
    """The names of the bits set in a clock-event mask, lowest bit first; unknown bits as hex."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    return (*names, f"0x{unknown:x}") if unknown else tuple(names)


def reasons_mask(names: Iterable[str]) -> int:
    """The inverse of `reason_names` for the known names (how a rank's reasons travel as a float)."""
    bits = {name: bit for bit, name in CLOCK_EVENT_REASONS.items()}
    return sum(bits.get(name, 0) for name in set(names))


@dataclass(frozen=True)
class Spread:
    """Min, median and max of one reading over the timed blocks."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread | None":
        return cls(min(values), statistics.median(values), max(values)) if values else None

    def to_dict(self) -> dict[str, float]:
        return {"min": self.min, "median": self.median, "max": self.max}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Spread | None":
        return cls(float(data["min"]), float(data["median"]), float(data["max"])) if data else None


#: The readings a `GpuTelemetry` keeps as spreads, in the order they travel between ranks.
READINGS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "utilization_pct")


@dataclass(frozen=True)
class GpuTelemetry:
    """One GPU over the timed blocks."""

    #: Its CUDA ordinal in the process that read it.
    device: int
    samples: int
    sm_clock_mhz: Spread | None = None
    mem_clock_mhz: Spread | None = None
    power_w: Spread | None = None
    temperature_c: Spread | None = None
    #: NVML's GPU utilization: % of the sample period in which a kernel ran (coarse: one short
    #: kernel per period reads as busy).
    utilization_pct: Spread | None = None
    #: The power limit in force (`nvmlDeviceGetEnforcedPowerLimit`).
    power_limit_w: float | None = None
    #: The highest SM clock the GPU may run at (`nvmlDeviceGetMaxClockInfo`).
    max_sm_clock_mhz: float | None = None
    #: Every clock-event reason seen in any sample (`CLOCK_EVENT_REASONS`' names).
    reasons: tuple[str, ...] = ()
    rank: int = 0

    @property
    def label(self) -> str:
        return f"rank {self.rank} gpu:{self.device}"

    @property
    def sm_clock_share(self) -> float | None:
        """Median SM clock / max SM clock: the share of its top speed the GPU ran at."""
        if self.sm_clock_mhz is None or not self.max_sm_clock_mhz:
            return None
        return self.sm_clock_mhz.median / self.max_sm_clock_mhz

    @property
    def power_share(self) -> float | None:
        """Median power draw / power limit."""
        if self.power_w is None or not self.power_limit_w:
            return None
        return self.power_w.median / self.power_limit_w

    @property
    def limited_by(self) -> tuple[str, ...]:
        """The reasons seen that hold clocks down for power or heat."""
        return tuple(reason for reason in self.reasons if reason in LIMITING_REASONS)

    def to_dict(self) -> dict[str, Any]:
        readings = {name: spread.to_dict() if (spread := getattr(self, name)) else None for name in READINGS}
        return {"device": self.device, "rank": self.rank, "samples": self.samples, **readings,
                "power_limit_w": self.power_limit_w, "max_sm_clock_mhz": self.max_sm_clock_mhz,
                "reasons": list(self.reasons),
                # Derived, stored for readers that do not recompute:
                "sm_clock_share": self.sm_clock_share, "power_share": self.power_share}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GpuTelemetry":
        return cls(device=int(data["device"]), samples=int(data.get("samples", 0)),
                   **{name: Spread.from_dict(data.get(name)) for name in READINGS},
                   power_limit_w=data.get("power_limit_w"), max_sm_clock_mhz=data.get("max_sm_clock_mhz"),
                   reasons=tuple(data.get("reasons") or ()), rank=int(data.get("rank", 0)))


@dataclass(frozen=True)
class Telemetry:
    """Every GPU's telemetry over the timed blocks, and the device's busy time per step."""

    gpus: tuple[GpuTelemetry, ...] = field(default=())
    #: Seconds the device ran kernels per step (torch profiler, GPU cases; the slowest rank's),
    #: None where it was not measured.
    kernel_s_per_step: float | None = None
    #: Why there are no GPU readings ("" where there are).
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [gpu.to_dict() for gpu in self.gpus], "kernel_s_per_step": self.kernel_s_per_step,
                "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Telemetry":
        return cls(tuple(GpuTelemetry.from_dict(gpu) for gpu in data.get("gpus") or ()),
                   data.get("kernel_s_per_step"), str(data.get("reason", "")))


def burst_gain(samples: Sequence[float], noise: float) -> float | None:
    """How much faster the first timed block ran than the median one (0.1: 10% faster), where the
    difference exceeds `noise` (the spread, IQR / median); None where it does not, or with fewer
    than 3 samples. A GPU that starts cool and below its power limit bursts, then settles to
    what it sustains."""
    if len(samples) < 3:
        return None
    median = statistics.median(samples)
    gain = median / samples[0] - 1.0 if samples[0] > 0 else 0.0
    return gain if abs(gain) > noise else None
