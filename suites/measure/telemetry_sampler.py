"""Sampling a case's GPUs through NVML while its timed blocks run (`suites.records.gpu_telemetry`).

`Runnable.telemetry_sampler` gives the timer a `GpuSampler` for a GPU case's devices (the same
NVML handles the energy meter finds: `suites.measure.energy_meters.nvml_handles`), one of its
instruments (`suites.measure.instruments`): the timer starts it before the first timed block and
stops it after the last, then gathers every rank's readings with the runnable's kernel time per
step (`record`, `gather_telemetry`). Each reading NVML refuses on a GPU (not supported there) is
left out for that GPU, never stored as zero.
"""
from __future__ import annotations

import math
import os
import threading
from abc import abstractmethod
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from suites.cases.vocabulary import DeviceKind
from suites.records.gpu_telemetry import (READINGS, GpuTelemetry, Spread, Telemetry, reason_names,
                                   reasons_mask)
from suites.measure.energy_meters import ENERGY_EXTRA, cuda_uuids, import_nvml, nvml_handles
from suites.measure.gathering import gather_rows
from suites.measure.instruments import Instrument, Window

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable

#: Seconds between two samples: NVML's utilization counts over ~1/6 s periods; finer sampling
#: would read the same figure again and take the launching thread's time.
SAMPLE_INTERVAL_S = 0.1

Reading = Callable[[Any], float]


def nvml_readings(nvml: ModuleType) -> dict[str, Reading]:
    """Each `READINGS` name and how to read it from a handle, in NVML's units turned into ours."""
    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    gpu_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    return {
        "sm_clock_mhz": lambda handle: float(nvml.nvmlDeviceGetClockInfo(handle, sm)),
        "mem_clock_mhz": lambda handle: float(nvml.nvmlDeviceGetClockInfo(handle, mem)),
        "power_w": lambda handle: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        "temperature_c": lambda handle: float(nvml.nvmlDeviceGetTemperature(handle, gpu_sensor)),
        "utilization_pct": lambda handle: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
    }


def clock_event_reader(nvml: ModuleType) -> Callable[[Any], int] | None:
    """NVML's current clock-event reasons (named throttle reasons before driver 535), or None."""
    return (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))


def _once(read: Callable[[], Any]) -> Any:
    """`read()`, or None where NVML refuses it (not supported on this GPU)."""
    try:
        return read()
    except Exception:  # pynvml raises NVMLError subclasses, a fake anything
        return None


@dataclass
class _SampledGpu:
    ordinal: int
    handle: Any
    #: The readings this GPU answered when sampling started.
    readings: dict[str, Reading]
    power_limit_w: float | None
    max_sm_clock_mhz: float | None
    values: dict[str, list[float]] = field(default_factory=dict)
    mask: int = 0
    samples: int = 0


class TelemetrySampler(Instrument):
    """Readings of this process's GPUs between `start` and `stop`."""

    what = "the GPU telemetry sampler"

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> list[GpuTelemetry]:
        """Each GPU's readings since `start` (rank 0 until gathered); [] where none were read."""

    def record(self, runnable: "Runnable", readings: list[GpuTelemetry] | None, window: Window,
               failure: str = "") -> dict[str, Any]:
        """`telemetry`: every rank's readings, and the runnable's kernel time per step over one more
        block (it steps: every rank calls this alike); a case cut short has none."""
        if readings is None and not failure:
            return {"telemetry": Telemetry(reason=self.reason or "cut short: no timed blocks to sample")}
        return {"telemetry": gather_telemetry(runnable, readings or [], failure or self.reason,
                                              kernel_seconds(runnable, window.block_size))}


def kernel_seconds(runnable: "Runnable", steps: int) -> float | None:
    """The runnable's kernel time per step over `steps` more steps; None where it measures none or
    its profiler failed (which costs the case that figure, not its timing)."""
    try:
        return runnable.kernel_seconds_per_step(steps)
    except Exception:  # profilers raise their own kinds
        return None


class GpuSampler(TelemetrySampler):
    """Samples the GPUs with CUDA ordinals `ordinals` between `start` and `stop` (`nvml`: the
    pynvml module; a test passes a fake, and with it its GPUs' UUIDs by CUDA ordinal, `uuids`,
    or none), each GPU once: `suites.measure.energy_meters.nvml_handles` ties an ordinal to NVML's
    device by UUID."""

    def __init__(self, ordinals: Sequence[int], nvml: ModuleType | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S, visible: str | None = None,
                 uuids: Sequence[str] | None = None) -> None:
        self.interval_s = interval_s
        self.gpus: list[_SampledGpu] = []
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        try:
            self.nvml = nvml or import_nvml()
        except ImportError:
            self.reason = f"no GPU telemetry: nvidia-ml-py is not installed ({ENERGY_EXTRA})"
            return
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
        self.reason = self._find(ordinals, visible, cuda_uuids(nvml, uuids))

    def _find(self, ordinals: Sequence[int], visible: str | None, uuids: Sequence[str] | None) -> str:
        nvml = self.nvml
        try:
            handles, problems = nvml_handles(nvml, ordinals, visible, uuids)
        except Exception as error:
            return f"no GPU telemetry: NVML did not initialise ({type(error).__name__}: {error})"
        readings = nvml_readings(nvml)
        sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        for ordinal, handle in handles:
            answered = {name: read for name, read in readings.items() if _once(lambda: read(handle)) is not None}
            limit = _once(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
            top = _once(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, sm))
            self.gpus.append(_SampledGpu(ordinal, handle, answered, None if limit is None else limit / 1000.0,
                                         None if top is None else float(top)))
        return "" if self.gpus else "no GPU telemetry: " + ("; ".join(problems) or "no GPU")

    def _sample(self) -> None:
        events = clock_event_reader(self.nvml)
        with self._lock:
            for gpu in self.gpus:
                for name, read in gpu.readings.items():
                    value = _once(lambda: read(gpu.handle))
                    if value is not None:
                        gpu.values.setdefault(name, []).append(value)
                mask = _once(lambda: events(gpu.handle)) if events else None
                gpu.mask |= int(mask or 0)
                gpu.samples += 1

    def _run(self, done: threading.Event) -> None:
        while not done.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        if not self.gpus:
            return
        for gpu in self.gpus:
            gpu.values, gpu.mask, gpu.samples = {}, 0, 0
        self._sample()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._done,), name="parbench-telemetry",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> list[GpuTelemetry]:
        if self._thread is None:
            return []
        self._done.set()
        self._thread.join()
        self._thread = None
        self._sample()  # the last block's end, also for a span shorter than one interval
        return [GpuTelemetry(gpu.ordinal, gpu.samples, **{name: Spread.of(gpu.values.get(name, []))
                                                          for name in READINGS},
                             power_limit_w=gpu.power_limit_w, max_sm_clock_mhz=gpu.max_sm_clock_mhz,
                             reasons=reason_names(gpu.mask)) for gpu in self.gpus]


class NoSampler(TelemetrySampler):
    """A case whose devices are not sampled, and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def start(self) -> None:
        pass

    def stop(self) -> list[GpuTelemetry]:
        return []


def sampler_for(kind: DeviceKind, gpu_ordinals: Sequence[int]) -> TelemetrySampler:
    """The sampler of a case's devices of `kind` in this process."""
    if kind is DeviceKind.GPU:
        return GpuSampler(gpu_ordinals)
    return NoSampler(f"no GPU telemetry on {kind} devices (NVML reads NVIDIA GPUs)")


def busy_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: a device's busy time from its activities'
    spans, where activities that overlap (kernels on several streams) count once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


#: A gathered row: device, samples, min/median/max of each reading, limit, max clock, reasons.
_WIDTH = 2 + 3 * len(READINGS) + 3


def _row(gpu: GpuTelemetry) -> list[float | None]:
    spreads: list[float | None] = []
    for name in READINGS:
        spread = getattr(gpu, name)
        spreads += [None] * 3 if spread is None else [spread.min, spread.median, spread.max]
    return [gpu.device, gpu.samples, *spreads, gpu.power_limit_w, gpu.max_sm_clock_mhz,
            float(reasons_mask(gpu.reasons))]


def _from_row(rank: int, row: Sequence[float | None]) -> GpuTelemetry:
    spreads = {name: None if None in (values := row[2 + 3 * i: 5 + 3 * i]) else Spread(*values)  # type: ignore[arg-type]
               for i, name in enumerate(READINGS)}
    limit, top, mask = row[-3:]
    return GpuTelemetry(int(row[0] or 0), int(row[1] or 0), **spreads, power_limit_w=limit,
                        max_sm_clock_mhz=top, reasons=reason_names(int(mask or 0)), rank=rank)


def gather_telemetry(runnable: "Runnable", gpus: list[GpuTelemetry], reason: str,
                     kernel_s_per_step: float | None) -> Telemetry:
    """Every rank's GPU readings, in rank order, and the slowest rank's kernel time per step,
    through the runnable's float `gather` (a collective: every rank calls it)."""
    gathered = tuple(_from_row(rank, row) for rank, row in gather_rows(runnable, [_row(g) for g in gpus], _WIDTH))
    kernels = [value for value in runnable.gather(-1.0 if kernel_s_per_step is None else kernel_s_per_step)
               if value >= 0 and not math.isnan(value)]
    return Telemetry(gathered, max(kernels) if kernels else None, "" if gathered else reason or "no GPU telemetry")
