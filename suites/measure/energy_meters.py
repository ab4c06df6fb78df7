"""Reading energy over the timed steps: the meter the timer starts and stops, per device kind.

`Runnable.energy_meter` gives the timer an `EnergyMeter` for the case's devices, one of its
instruments (`suites.measure.instruments`): the timer starts it just before the first timed block
and stops it after the last — or, where the timed blocks were shorter than its counter needs
(`min_window_s`: `WINDOW_UPDATES` update periods, 2 s for NVML's energy counter), after untimed
blocks of the same step that make the window long enough, counting their steps too — then
gathers every rank's readings (`gather_energy`). Each reading records its counter's update period
and, for a GPU, the board's enforced power limit, from which its flags are judged. What a reading
means is in `suites.records.energy_readings`.

- GPUs: `NvmlMeter`, NVML through `nvidia-ml-py` (the optional extra `parbench[energy]`,
  imported only here, only for GPU cases). The total-energy counter where the GPU has one,
  else the board power sampled every `POWER_INTERVAL_S` on a thread and integrated.
  A process's CUDA ordinals are tied to NVML's devices by UUID (`nvml_handles`): CUDA numbers
  the visible GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus, and
  CUDA_VISIBLE_DEVICES renumbers them, so an index may name another GPU (issue 32, N16). A GPU
  that several of a process's ordinals name is read once.
- CPUs: `RaplMeter`, the package counters under /sys/class/powercap. The packages are shared
  by every rank process on the host, so only local rank 0 reads them.
"""
from __future__ import annotations

import os
import re
import threading
import time
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

from suites.cases.vocabulary import DeviceKind
from suites.records.energy_readings import (UPDATE_PERIOD_S, DeviceEnergy, EnergyMeasurement, EnergyMethod, absent,
                                            min_window_s)
from suites.measure.gathering import gather_rows
from suites.measure.instruments import Instrument, Window

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable

POWERCAP = Path("/sys/class/powercap")
#: Top-level RAPL zones (one per package); `intel-rapl:0:1` and the like are parts of a package.
PACKAGE_ZONE = re.compile(r"^intel-rapl:(\d+)$")
#: Seconds between two board-power samples where a GPU has no energy counter.
POWER_INTERVAL_S = 0.02
ENERGY_EXTRA = "pip install 'parbench[energy]' (nvidia-ml-py)"

Clock = Callable[[], float]


class EnergyMeter(Instrument):
    """Energy of this process's devices between `start` and `stop`."""

    what = "the energy meter"
    #: The methods it reads with (one per device kind or GPU); none where it reads nothing.
    methods: tuple[EnergyMethod, ...] = ()

    @property
    def min_window_s(self) -> float:
        """The longest of its methods' shortest true windows (`energy_readings.min_window_s`)."""
        return max((min_window_s(method) for method in self.methods), default=0.0)

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> list[DeviceEnergy]:
        """The readings since `start` (rank 0 until gathered); [] where none could be read."""

    def record(self, runnable: "Runnable", readings: list[DeviceEnergy] | None, window: Window,
               failure: str = "") -> dict[str, Any]:
        """`energy`: every rank's readings over the window's steps; absent where none were read
        (a case cut short: no timed blocks to read over)."""
        if readings is None and not failure:
            return {"energy": absent(self.reason or "cut short: no timed blocks to read energy over")}
        return {"energy": gather_energy(runnable, readings or [], window.steps, failure or self.reason)}


class NoMeter(EnergyMeter):
    """A process or device kind whose energy is not read, and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def start(self) -> None:
        pass

    def stop(self) -> list[DeviceEnergy]:
        return []


# --- CPUs: RAPL --------------------------------------------------------------------------------

@dataclass
class RaplZone:
    package: int
    energy_file: Path
    #: The counter wraps to 0 after this many microjoules.
    max_range_uj: int | None
    start_uj: int = 0


def rapl_delta_uj(start: int, end: int, max_range_uj: int | None) -> int:
    """Microjoules between two readings of a counter that wraps at `max_range_uj` (one wrap at
    most can be told apart: at 200 W a 262 kJ range wraps every ~22 minutes)."""
    if end >= start:
        return end - start
    if not max_range_uj:
        raise ValueError("the RAPL counter went backwards and its range is unknown")
    return end + max_range_uj - start


class RaplMeter(EnergyMeter):
    """Every CPU package's RAPL counter under `root` (default `POWERCAP`)."""

    def __init__(self, root: Path | None = None, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.zones: list[RaplZone] = []
        self._started = 0.0
        self.reason = self._find(Path(root or POWERCAP))

    def _find(self, root: Path) -> str:
        if not root.is_dir():
            return (f"no CPU energy counter: {root} does not exist (no RAPL powercap driver; virtual machines "
                    "and containers without it expose none)")
        zones = sorted((int(match.group(1)), path) for path in root.iterdir()
                       if (match := PACKAGE_ZONE.match(path.name)))
        if not zones:
            return f"no CPU energy counter: {root} has no RAPL package zone (intel-rapl:N)"
        problems = []
        for package, path in zones:
            energy = path / "energy_uj"
            try:
                int(energy.read_text())
            except PermissionError:
                problems.append(f"{energy} is readable by root only (Linux 5.10+, after CVE-2020-8694): "
                                f"`sudo chmod a+r {root}/intel-rapl:*/energy_uj` to allow it")
                continue
            except (OSError, ValueError) as error:
                problems.append(f"{energy} is not readable ({type(error).__name__})")
                continue
            self.zones.append(RaplZone(package, energy, _read_int(path / "max_energy_range_uj")))
        if self.zones:
            self.methods = ("rapl",)
        return "" if self.zones else "no CPU energy counter readable: " + "; ".join(problems)

    def start(self) -> None:
        for zone in self.zones:
            zone.start_uj = int(zone.energy_file.read_text())
        self._started = self.clock()

    def stop(self) -> list[DeviceEnergy]:
        ends = [int(zone.energy_file.read_text()) for zone in self.zones]
        seconds = self.clock() - self._started
        return [DeviceEnergy("cpu", zone.package, rapl_delta_uj(zone.start_uj, end, zone.max_range_uj) / 1e6,
                             seconds, "rapl", update_period_s=UPDATE_PERIOD_S["rapl"])
                for zone, end in zip(self.zones, ends)]


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


# --- GPUs: NVML --------------------------------------------------------------------------------

def import_nvml() -> ModuleType:
    """`pynvml` from nvidia-ml-py; ImportError where it is not installed."""
    import pynvml  # noqa: PLC0415 - optional dependency, GPU cases only
    return pynvml


def nvml_indices(ordinals: Sequence[int], visible: str | None) -> list[int | str | None]:
    """NVML's index (or UUID) of each CUDA ordinal of this process, read off CUDA_VISIBLE_DEVICES
    as if CUDA numbered GPUs as NVML does (by PCI bus): `nvml_handles`' fallback where CUDA cannot
    give the UUIDs. None for an ordinal the variable does not list (every one where it is set
    empty: no GPU)."""
    if visible is None:
        return list(ordinals)
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    return [None if o >= len(entries) else int(entries[o]) if entries[o].isdigit() else entries[o]
            for o in ordinals]


def nvml_handles(nvml: ModuleType, ordinals: Sequence[int], visible: str | None,
                 uuids: Sequence[str] | None = None) -> tuple[list[tuple[int, Any]], list[str]]:
    """NVML initialised (raises where it cannot be), then (CUDA ordinal, NVML handle) of each
    of this process's GPUs it has, one per GPU, and what went wrong for the others.

    `uuids` are the UUIDs of this process's GPUs by CUDA ordinal
    (`suites.hardware.devices.cuda_device_uuids`): an ordinal's handle is NVML's device of that
    UUID ("GPU-..." or, for a MIG instance, "MIG-..."), whatever CUDA_VISIBLE_DEVICES and
    CUDA_DEVICE_ORDER made its index. Only where CUDA cannot say (None: no CUDA driver, or a test's
    fake NVML) is CUDA_VISIBLE_DEVICES read as NVML's numbering (`nvml_indices`), right where
    CUDA_DEVICE_ORDER=PCI_BUS_ID or the GPUs are all alike. Ordinals naming one GPU (the same
    UUID) get one handle, the first's: that GPU's energy is read once."""
    nvml.nvmlInit()
    handles, problems = [], []
    seen: set[str] = set()
    keys: list[int | str | None] = (list(nvml_indices(ordinals, visible)) if uuids is None else
                                    [uuids[o] if 0 <= o < len(uuids) else None for o in ordinals])
    for ordinal, key in zip(ordinals, keys):
        if key is None:
            problems.append(f"GPU {ordinal} is not among CUDA_VISIBLE_DEVICES={visible}" if uuids is None
                            else f"GPU {ordinal} is not among the {len(uuids or ())} GPU(s) CUDA sees")
            continue
        try:
            handle = (_handle_by_uuid(nvml, key) if uuids is not None else
                      nvml.nvmlDeviceGetHandleByUUID(key) if isinstance(key, str)
                      else nvml.nvmlDeviceGetHandleByIndex(key))
        except Exception as error:  # pynvml raises NVMLError subclasses, a fake anything
            problems.append(f"GPU {ordinal} ({key}): no NVML handle ({type(error).__name__})")
            continue
        identity = _nvml_uuid(nvml, handle) or str(key)
        if identity not in seen:
            seen.add(identity)
            handles.append((ordinal, handle))
    return handles, problems


def _handle_by_uuid(nvml: ModuleType, uuid: str) -> Any:
    """NVML's device of the CUDA UUID `uuid` (`format_uuid`'s form): a GPU's, else a MIG
    instance's; the GPU's error where neither is known."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
    except Exception as error:  # pynvml's NVMLError_NotFound, or a fake's
        try:
            return nvml.nvmlDeviceGetHandleByUUID(f"MIG-{uuid}")
        except Exception:
            raise error from None


def _nvml_uuid(nvml: ModuleType, handle: Any) -> str | None:
    """NVML's UUID of the device behind `handle`, None where NVML cannot say."""
    try:
        uuid = nvml.nvmlDeviceGetUUID(handle)
    except Exception:  # pynvml's NVMLError, or a fake without it
        return None
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def cuda_uuids(nvml: ModuleType | None, uuids: Sequence[str] | None) -> Sequence[str] | None:
    """The UUIDs that tie CUDA ordinals to NVML (`nvml_handles`): `uuids` where given; else the
    CUDA driver's (`cuda_device_uuids`) for the real NVML (`nvml` None), none for a fake one."""
    if uuids is not None or nvml is not None:
        return uuids
    from suites.hardware.devices import cuda_device_uuids

    return cuda_device_uuids()


@dataclass
class _Gpu:
    ordinal: int
    handle: Any
    #: NVML's index of the GPU: the same for every rank that shares it.
    physical: int
    method: EnergyMethod
    #: The board's enforced power limit, watts; None where NVML does not say.
    power_limit_w: float | None = None
    start_mj: int = 0
    powers: list[tuple[float, float]] = field(default_factory=list)  # (seconds, watts)


class NvmlMeter(EnergyMeter):
    """The GPUs with CUDA ordinals `ordinals` in this process, through NVML (`nvml`: the pynvml
    module; a test passes a fake, and with it the UUIDs of its GPUs by CUDA ordinal, `uuids`,
    or none: `nvml_handles`)."""

    def __init__(self, ordinals: Sequence[int], nvml: ModuleType | None = None,
                 clock: Clock = time.monotonic, interval_s: float = POWER_INTERVAL_S,
                 visible: str | None = None, uuids: Sequence[str] | None = None) -> None:
        self.clock, self.interval_s = clock, interval_s
        self.gpus: list[_Gpu] = []
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._started = 0.0
        try:
            self.nvml = nvml or import_nvml()
        except ImportError:
            self.reason = f"no GPU energy reading: nvidia-ml-py is not installed ({ENERGY_EXTRA})"
            return
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
        self.reason = self._find(ordinals, visible, cuda_uuids(nvml, uuids))

    def _find(self, ordinals: Sequence[int], visible: str | None, uuids: Sequence[str] | None) -> str:
        nvml = self.nvml
        try:
            handles, problems = nvml_handles(nvml, ordinals, visible, uuids)
        except Exception as error:  # pynvml raises NVMLError subclasses, a fake anything
            return f"no GPU energy reading: NVML did not initialise ({type(error).__name__}: {error})"
        for ordinal, handle in handles:
            for method, read in (("nvml_counter", nvml.nvmlDeviceGetTotalEnergyConsumption),
                                 ("nvml_power", nvml.nvmlDeviceGetPowerUsage)):
                try:
                    read(handle)
                except Exception as error:
                    problems.append(f"GPU {ordinal}: {read.__name__} failed ({type(error).__name__})")
                    continue
                self.gpus.append(_Gpu(ordinal, handle, _nvml_index(nvml, handle, ordinal), method,  # type: ignore[arg-type]
                                      enforced_power_limit_w(nvml, handle)))
                break
        self.methods = tuple(dict.fromkeys(gpu.method for gpu in self.gpus))
        return "" if self.gpus else "no GPU energy reading: " + ("; ".join(problems) or "no GPU")

    def _sample_power(self) -> None:
        now = self.clock()
        for gpu in self.gpus:
            if gpu.method == "nvml_power":
                gpu.powers.append((now, self.nvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1000.0))

    def _run(self, done: threading.Event) -> None:
        while not done.wait(self.interval_s):
            self._sample_power()

    def start(self) -> None:
        for gpu in self.gpus:
            gpu.powers = []
            if gpu.method == "nvml_counter":
                gpu.start_mj = self.nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)
        self._started = self.clock()
        if any(gpu.method == "nvml_power" for gpu in self.gpus):
            self._sample_power()
            self._done = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._done,), name="parbench-power",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> list[DeviceEnergy]:
        if self._thread is not None:
            self._done.set()
            self._thread.join()
            self._thread = None
            self._sample_power()
        ends = {id(gpu): self.nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)
                for gpu in self.gpus if gpu.method == "nvml_counter"}
        seconds = self.clock() - self._started
        readings = []
        for gpu in self.gpus:
            if gpu.method == "nvml_counter":
                joules = (ends[id(gpu)] - gpu.start_mj) / 1000.0
            elif len(gpu.powers) >= 2:
                joules, seconds = integrate(gpu.powers), gpu.powers[-1][0] - gpu.powers[0][0]
            else:
                continue
            readings.append(DeviceEnergy("gpu", gpu.physical, joules, seconds, gpu.method,
                                         power_limit_w=gpu.power_limit_w,
                                         update_period_s=UPDATE_PERIOD_S[gpu.method]))
        return readings


def enforced_power_limit_w(nvml: ModuleType, handle: Any) -> float | None:
    """The power limit NVML enforces on the board behind `handle`, watts; None where it cannot say."""
    try:
        return nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
    except Exception:  # pynvml's NVMLError (not supported), or a fake without it
        return None


def _nvml_index(nvml: ModuleType, handle: Any, ordinal: int) -> int:
    """NVML's index of the GPU behind `handle` (whatever CUDA_VISIBLE_DEVICES renumbered), the
    CUDA ordinal where NVML cannot say."""
    try:
        return int(nvml.nvmlDeviceGetIndex(handle))
    except Exception:  # pynvml's NVMLError, or a fake without it
        return ordinal


def integrate(powers: Sequence[tuple[float, float]]) -> float:
    """Joules from (seconds, watts) samples: the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(powers, powers[1:]))


# --- which meter, and gathering --------------------------------------------------------------

def meter_for(kind: DeviceKind, gpu_ordinals: Sequence[int], local_rank: int = 0) -> EnergyMeter:
    """The meter of a case's devices of `kind` in this process."""
    if kind is DeviceKind.GPU:
        return NvmlMeter(gpu_ordinals)
    if kind is DeviceKind.CPU:
        if local_rank != 0:
            return NoMeter("the CPU packages are read by local rank 0, whose readings cover this rank's cores")
        return RaplMeter()
    return NoMeter(f"no energy counter is read on {kind} devices")


_METHODS: tuple[EnergyMethod, ...] = ("nvml_counter", "nvml_power", "rapl")
_KINDS = ("cpu", "gpu")


def gather_energy(runnable: "Runnable", readings: list[DeviceEnergy], steps: int,
                  reason: str) -> EnergyMeasurement:
    """Every rank's readings, in rank order, through the runnable's float `gather` (a collective:
    every rank calls it). `reason` (this rank's meter's, which rank 0 stores) says why there are
    none where no rank read any."""
    node = this_node()
    rows = [(_KINDS.index(r.kind), r.device, r.joules, r.seconds, _METHODS.index(r.method), node, r.power_limit_w,
             r.update_period_s) for r in readings]
    gathered = [DeviceEnergy(_KINDS[int(kind)], int(device), joules, seconds,  # type: ignore[arg-type]
                             _METHODS[int(method)], rank, int(node), limit, period)
                for rank, (kind, device, joules, seconds, method, node, limit, period)
                in gather_rows(runnable, rows, 8)
                if None not in (kind, device, joules, seconds, method, node)]
    if not gathered:
        return absent(reason or "no energy reading")
    return EnergyMeasurement(once_per_device(gathered), steps)


def this_node() -> int:
    """This process's machine among the case's: torchrun's GROUP_RANK (the node rank), else 0."""
    group = os.environ.get("GROUP_RANK", "")
    return int(group) if group.isdigit() else 0


def once_per_device(readings: list[DeviceEnergy]) -> tuple[DeviceEnergy, ...]:
    """One reading per physical device, the lowest rank's: ranks sharing a GPU (the shared-GPU
    emulation) each read its whole counter, and summing them counted it once per rank (issue
    32, N7)."""
    seen: set[tuple[int, str, int]] = set()
    kept = []
    for reading in sorted(readings, key=lambda r: r.rank):
        key = (reading.node, reading.kind, reading.device)
        if key not in seen:
            seen.add(key)
            kept.append(reading)
    return tuple(kept)
