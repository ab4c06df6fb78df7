"""Peak throughput: from the editable peaks table, and measured on this machine by `calibrate`."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites.kept.devices import DeviceInfo
from suites.cases.user_files import shipped_table, user_table
from suites.cases.vocabulary import DeviceKind, Precision

PEAKS_ENV = "PARBENCH_PEAKS"
CALIBRATION_FILE = "calibration.json"


@dataclass(frozen=True)
class PeakTable:
    gpu: tuple[dict[str, Any], ...]
    cpu: tuple[dict[str, Any], ...]
    version: int

    @classmethod
    def load(cls) -> "PeakTable":
        data = shipped_table("peaks.toml")
        gpu, cpu = list(data.get("gpu", [])), list(data.get("cpu", []))
        user_file = os.environ.get(PEAKS_ENV)
        if user_file:
            user = user_table(user_file, f"peaks table ({PEAKS_ENV})", f"fix the file or unset {PEAKS_ENV}")
            gpu = list(user.get("gpu", [])) + gpu
            cpu = list(user.get("cpu", [])) + cpu
        return cls(tuple(gpu), tuple(cpu), int(data.get("version", 0)))

    def peak_tflops(self, device: DeviceInfo, precision: Precision) -> float | None:
        """Peak of one device (not the sum over several) in `precision`, or None if unknown."""
        key = str(precision)
        if device.kind is DeviceKind.GPU and device.names:
            for entry in self.gpu:
                if entry["match"] in device.names[0]:
                    return entry.get(key)
            return None
        if device.kind is DeviceKind.CPU:
            isa = device.details.get("isa", [])
            ghz = cpu_clock_ghz()
            cores = device.details.get("usable_cores") or os.cpu_count() or 1
            for entry in self.cpu:
                if entry["isa"] in isa and key in entry and ghz:
                    return entry[key] * cores * ghz / 1000.0
        return None


def cpu_clock_ghz() -> float | None:
    """The highest clock /proc/cpuinfo or sysfs reports (boost where cpufreq tells it)."""
    try:
        max_khz = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()
        return int(max_khz) / 1e6
    except (OSError, ValueError):
        pass
    try:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("cpu MHz")]
    except OSError:
        return None
    return max(mhz) / 1000.0 if mhz else None


def calibration_path(results_dir: Path) -> Path:
    return Path(results_dir) / CALIBRATION_FILE


def load_calibration(results_dir: Path) -> dict[str, Any]:
    """{machine: {device key: {precision: tflops, ...}}}; an unreadable file counts as empty."""
    path = calibration_path(results_dir)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def device_key(device: DeviceInfo) -> str:
    return f"{device.kind}:{device.names[0] if device.names else '?'}"


def measured_peak(results_dir: Path, machine: str, device: DeviceInfo, precision: Precision) -> float | None:
    entry = load_calibration(results_dir).get(machine, {}).get(device_key(device), {})
    return entry.get(str(precision), {}).get("tflops") if isinstance(entry.get(str(precision)), dict) else None


def save_calibration(results_dir: Path, machine: str, device: DeviceInfo, precision: Precision,
                     tflops: float, how: str) -> Path:
    data = load_calibration(results_dir)
    data.setdefault(machine, {}).setdefault(device_key(device), {})[str(precision)] = {
        "tflops": tflops, "how": how}
    path = calibration_path(results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
    return path
