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
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from suites.records.metric_registry import JOULES_PER_KWH

EnergyMethod = Literal["nvml_counter", "nvml_power", "rapl"]


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

    @property
    def label(self) -> str:
        return f"rank {self.rank} {self.kind}:{self.device}"

    @property
    def watts(self) -> float | None:
        return self.joules / self.seconds if self.seconds > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DeviceEnergy":
        return cls(kind=data["kind"], device=int(data["device"]), joules=float(data["joules"]),
                   seconds=float(data["seconds"]), method=data["method"], rank=int(data.get("rank", 0)),
                   node=int(data.get("node", 0)))


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
                "joules_per_step": self.joules_per_step, "watts": self.watts}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EnergyMeasurement":
        return cls(tuple(DeviceEnergy.from_dict(d) for d in data.get("devices") or ()),
                   int(data.get("steps", 0)), str(data.get("reason", "")))


def absent(reason: str) -> EnergyMeasurement:
    return EnergyMeasurement(reason=reason)
