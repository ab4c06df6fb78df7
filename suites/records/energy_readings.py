"""Energy a case's devices used over its timed steps: one reading per device (GPU) or CPU package.

How a reading was taken is part of it (`method`):
- ``nvml_counter``: NVML's total-energy counter of one GPU (`nvmlDeviceGetTotalEnergyConsumption`,
  millijoules since the driver loaded; Volta and newer), read before and after the timed blocks.
- ``nvml_power``: where that counter is missing, NVML's board power (`nvmlDeviceGetPowerUsage`)
  sampled through the timed blocks and integrated over time (trapezoids): power x time.
- ``rapl``: a CPU package's RAPL counter under /sys/class/powercap (`energy_uj`), read before and
  after, a wraparound corrected with `max_energy_range_uj`. A package counts every core and its
  memory controller, whoever ran on them: other processes' work on the machine is included.

Where nothing could be read the measurement has no readings and `reason` says why (no counter
is never zero joules): the record's energy metrics are then absent, not zero.

A reading is only as true as its window is long. These counters move in steps, once per update
period (`UPDATE_PERIOD_S`), so a reading over a window W may be off by up to one period's energy:
NVML's total-energy counter is updated about every 100 ms (ML.ENERGY's Zeus: "approximately every
100 ms on NVIDIA GPUs"; PETSc's `PetscLogGpuEnergyMeter`: "every 20-100 ms"; on A100/H100 its power
sensor averages 25 ms of each 100 ms, Yang et al., SC'24, arXiv 2312.02741); NVML's board power is
a 1 s running average on Ampere and newer (NVML's `nvmlDeviceGetPowerUsage`); RAPL's counters
update about every millisecond (the RAPL time unit, 976 us; Haehnel et al., "Measuring energy
consumption for short code paths using RAPL", 2012). The timer reads energy over at least
`WINDOW_UPDATES` periods (`min_window_s`: 2 s for NVML's counter), so that one period is at most
5% of the window — an H100's 0.2-0.5 s windows read up to 856 W on a 700 W board, its 4 s windows
693-697 W. Each reading keeps its flags (`DeviceEnergy.flags`):

- ``short_window``: it spans less than `min_window_s` (records older than the rule; a case whose
  top-up of the window ran out of time);
- ``over_limit``: its average power is above the board's enforced power limit (NVML's
  `nvmlDeviceGetEnforcedPowerLimit`, recorded with the reading; for older records, the
  environment's nvidia-smi power limit, `with_power_limits`): a board cannot average more than
  its limit, so the meter is wrong.

A flagged reading is kept, but no ratio (work per joule across machines) may be drawn from it
(`EnergyMeasurement.ratio_ok`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping

from suites.records.metric_registry import ENERGY_FLAGS, JOULES_PER_KWH

EnergyMethod = Literal["nvml_counter", "nvml_power", "rapl"]

#: Seconds between two updates of each method's counter (see the module's docstring for sources).
UPDATE_PERIOD_S: dict[str, float] = {"nvml_counter": 0.1, "nvml_power": 1.0, "rapl": 0.001}
#: A true reading spans at least this many update periods: one period's energy is then at most
#: 1/20 = 5% of the window's.
WINDOW_UPDATES = 20
SHORT_WINDOW, OVER_LIMIT = "short_window", "over_limit"
assert set(ENERGY_FLAGS) == {SHORT_WINDOW, OVER_LIMIT}


def min_window_s(method: str) -> float:
    """The shortest window a reading of `method` is true over: `WINDOW_UPDATES` update periods."""
    return UPDATE_PERIOD_S[method] * WINDOW_UPDATES


@dataclass(frozen=True)
class DeviceEnergy:
    """What one device (GPU) or CPU package used while the timed steps ran."""

    kind: Literal["gpu", "cpu"]
    #: GPU: its NVML index (the same in every process of its machine; the CUDA ordinal where
    #: NVML gives none); CPU: the RAPL package number.
    device: int
    joules: float
    #: Wall seconds between the two readings (or the first and last power sample).
    seconds: float
    method: EnergyMethod
    #: The rank process that read it (0 in a single-process case).
    rank: int = 0
    #: The machine it is on, among the case's (torchrun's GROUP_RANK; 0 on one machine).
    node: int = 0
    #: GPU: the board's enforced power limit when it was read, watts (NVML); None for a CPU
    #: package (RAPL's limits are targets it may exceed for a while) and in older records.
    power_limit_w: float | None = None
    #: Seconds between two updates of its counter (`UPDATE_PERIOD_S`, recorded with the reading);
    #: None in older records, read as its method's.
    update_period_s: float | None = None

    @property
    def label(self) -> str:
        return f"rank {self.rank} {self.kind}:{self.device}"

    @property
    def watts(self) -> float | None:
        return self.joules / self.seconds if self.seconds > 0 else None

    @property
    def min_window_s(self) -> float:
        """The shortest window this reading is true over (`WINDOW_UPDATES` update periods)."""
        return (self.update_period_s or UPDATE_PERIOD_S[self.method]) * WINDOW_UPDATES

    @property
    def flags(self) -> tuple[str, ...]:
        """Why no ratio may be drawn from it: `SHORT_WINDOW`, `OVER_LIMIT` (the module's docstring)."""
        watts = self.watts
        return tuple(name for name, flagged in (
            (SHORT_WINDOW, self.seconds < self.min_window_s),
            (OVER_LIMIT, watts is not None and self.power_limit_w is not None and watts > self.power_limit_w))
            if flagged)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "device": self.device, "joules": self.joules, "seconds": self.seconds,
                "method": self.method, "rank": self.rank, "node": self.node, "power_limit_w": self.power_limit_w,
                "update_period_s": self.update_period_s,
                # Derived, stored for readers that do not recompute:
                "min_window_s": self.min_window_s, "flags": list(self.flags)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DeviceEnergy":
        limit, period = data.get("power_limit_w"), data.get("update_period_s")
        return cls(kind=data["kind"], device=int(data["device"]), joules=float(data["joules"]),
                   seconds=float(data["seconds"]), method=data["method"], rank=int(data.get("rank", 0)),
                   node=int(data.get("node", 0)), power_limit_w=None if limit is None else float(limit),
                   update_period_s=None if period is None else float(period))


@dataclass(frozen=True)
class EnergyMeasurement:
    """Every device's energy over `steps` timed steps, or why there is none (`reason`)."""

    devices: tuple[DeviceEnergy, ...] = field(default=())
    #: Steps the readings span (timed blocks x block size).
    steps: int = 0
    #: Why there are no readings ("" where there are).
    reason: str = ""

    @property
    def measured(self) -> bool:
        return bool(self.devices) and self.steps > 0

    @property
    def flags(self) -> tuple[str, ...]:
        """Every device's flags together (`DeviceEnergy.flags`), in `ENERGY_FLAGS`' order."""
        found = {flag for device in self.devices for flag in device.flags}
        return tuple(flag for flag in ENERGY_FLAGS if flag in found)

    @property
    def ratio_ok(self) -> bool:
        """Measured, and no reading flagged: a figure a work-per-joule ratio may be drawn from."""
        return self.measured and not self.flags

    def with_power_limits(self, limits: Mapping[int, float]) -> "EnergyMeasurement":
        """GPU readings that recorded no power limit, given their board's from `limits` (GPU index
        -> watts: `power_limits` of the record's environment): how an older record is flagged."""
        return replace(self, devices=tuple(
            replace(d, power_limit_w=limits.get(d.device)) if d.kind == "gpu" and d.power_limit_w is None else d
            for d in self.devices))

    @property
    def joules_per_step(self) -> float | None:
        """All devices together."""
        return sum(d.joules for d in self.devices) / self.steps if self.measured else None

    @property
    def watts(self) -> float | None:
        """Average power of all devices together: the sum of each device's average."""
        powers = [d.watts for d in self.devices]
        return sum(powers) if self.measured and None not in powers else None  # type: ignore[arg-type]

    def per_device(self, samples_per_step: float | None = None, n_devices: int = 1) -> list[dict[str, Any]]:
        """Each device's joules per step and average watts; with the case's samples per step,
        its samples per joule and per kWh, each device credited with an even share of the
        samples (samples_per_step / n_devices): what a data-parallel device processes."""
        rows = []
        for device in self.devices:
            per_step = device.joules / self.steps if self.steps else None
            row: dict[str, Any] = {"device": device.label, "method": device.method,
                                   "joules_per_step": per_step, "watts": device.watts}
            if samples_per_step and per_step:
                share = samples_per_step / max(n_devices, 1)
                row["samples_per_joule"] = share / per_step
                row["samples_per_kwh"] = share / per_step * JOULES_PER_KWH
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"devices": [d.to_dict() for d in self.devices], "steps": self.steps, "reason": self.reason,
                # Derived, stored for readers that do not recompute:
                "joules_per_step": self.joules_per_step, "watts": self.watts, "flags": list(self.flags)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EnergyMeasurement":
        return cls(tuple(DeviceEnergy.from_dict(d) for d in data.get("devices") or ()),
                   int(data.get("steps", 0)), str(data.get("reason", "")))


def absent(reason: str) -> EnergyMeasurement:
    return EnergyMeasurement(reason=reason)


def power_limits(environment: Mapping[str, Any]) -> dict[int, float]:
    """GPU index -> power limit (watts) of a record's environment (nvidia-smi's `power_limit_w`,
    `suites.records.environment_schema.Gpu`): the limits an older record's readings are checked
    against (`EnergyMeasurement.with_power_limits`)."""
    return {int(gpu["index"]): float(gpu["power_limit_w"]) for gpu in environment.get("gpus") or ()
            if isinstance(gpu, Mapping) and gpu.get("index") is not None and gpu.get("power_limit_w") is not None}
