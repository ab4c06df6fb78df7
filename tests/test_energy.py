"""Energy over the timed steps: NVML (through a fake library), RAPL (through a fake sysfs tree),
and what a machine without a counter stores (the reason, never zero)."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from suites.records.energy_readings import DeviceEnergy, EnergyMeasurement
from suites.records.measurement import Measurement
from suites.records.metric_registry import METRICS, Work
from suites.measure.energy_meters import NvmlMeter, RaplMeter, meter_for, nvml_indices, rapl_delta_uj
from suites.cases.vocabulary import DeviceKind
from suites.measure.timing import measure
from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.cases.vocabulary import Status
from suites.records.store import ResultsStore
from suites.runner.execute import Outcome
from suites.runner.recording import RunContext, store_outcome
from suites.strategies.jobs import job_for
from tests.test_timing import FakeClock, PretendDevice, constant

TINY = TimingConfig(warmup_s=0.02, min_warmup_steps=1, block_min_s=0.002, min_samples=10, min_time_s=0.04,
                    budget_s=0.15)


class NotSupported(Exception):
    """What pynvml raises for a query the GPU does not answer (NVMLError_NotSupported)."""


class FakeNvml:
    """The part of pynvml parbench calls: per NVML index, a total-energy counter in mJ (None:
    the GPU has none) and a board power in mW."""

    def __init__(self, counters: dict[int, int | None], power_mw: dict[int, int]) -> None:
        self.counters, self.power_mw = counters, power_mw
        self.initialised = False

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        if index not in self.power_mw:
            raise NotSupported(f"no GPU {index}")
        return SimpleNamespace(index=index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> SimpleNamespace:
        raise NotSupported(uuid)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimpleNamespace) -> int:
        value = self.counters.get(handle.index)
        if value is None:
            raise NotSupported("no energy counter")
        return value

    def nvmlDeviceGetPowerUsage(self, handle: SimpleNamespace) -> int:
        return self.power_mw[handle.index]


class PoweredDevice(PretendDevice):
    """A pretend GPU whose NVML counter (index 3: CUDA_VISIBLE_DEVICES=3) advances at `watts`
    while it works, on the controlled clock."""

    def __init__(self, clock: FakeClock, nvml: FakeNvml, watts: float, step_s: float) -> None:
        super().__init__(clock, constant(step_s))
        self.nvml, self.watts = nvml, watts

    def synchronize(self) -> None:
        self.nvml.counters[3] += round(self.pending * self.watts * 1000)
        super().synchronize()

    def energy_meter(self) -> NvmlMeter:
        return NvmlMeter([0], nvml=self.nvml, clock=self.clock, visible="3")  # type: ignore[arg-type]


def test_the_timer_reads_the_nvml_counter_around_the_timed_blocks_only():
    clock = FakeClock()
    nvml = FakeNvml({3: 1_000_000}, {3: 0})
    device = PoweredDevice(clock, nvml, watts=250.0, step_s=0.01)
    measurement = measure(device, TINY, clock)
    energy = measurement.energy
    assert energy is not None and energy.reason == ""
    (reading,) = energy.devices
    assert (reading.kind, reading.device, reading.method) == ("gpu", 0, "nvml_counter")
    # The timed steps, then untimed ones of the same step that lengthen the window toward what the
    # counter needs (`test_energy_windows`); warm-up and first step not counted.
    assert energy.steps >= measurement.n * measurement.block_size
    assert energy.steps * 0.01 == pytest.approx(reading.seconds)
    assert energy.joules_per_step == pytest.approx(2.5)  # 250 W x 10 ms
    assert energy.watts == pytest.approx(250.0)
    # Stored and read back: the record keeps the readings.
    again = Measurement.from_dict(measurement.to_dict()).energy
    assert again == energy and measurement.to_dict()["energy"]["joules_per_step"] == pytest.approx(2.5)
    # The registry's metrics of it: 32 samples per step.
    work = Work(median_s=0.01, samples_per_step=32, flops_per_step=1e9,
                energy_joules_per_step=energy.joules_per_step, energy_watts=energy.watts)
    assert METRICS["samples_per_joule"].value(work) == pytest.approx(32 / 2.5)
    assert METRICS["samples_per_kwh"].value(work) == pytest.approx(32 / 2.5 * 3.6e6)
    assert METRICS["gflop_per_joule"].value(work) == pytest.approx(1 / 2.5)
    assert METRICS["energy_watts"].value(work) == pytest.approx(250.0)


def test_a_gpu_without_the_counter_is_read_as_sampled_power_times_time():
    ticks = itertools.count()
    nvml = FakeNvml({0: None}, {0: 200_000})  # 200 W, no counter
    meter = NvmlMeter([0], nvml=nvml, clock=lambda: next(ticks) * 0.01, interval_s=0.001, visible="0")
    meter.start()
    (reading,) = meter.stop()
    assert reading.method == "nvml_power" and reading.seconds > 0
    assert reading.joules == pytest.approx(200.0 * reading.seconds)


def test_per_device_and_summed_figures_of_two_gpus():
    energy = EnergyMeasurement((DeviceEnergy("gpu", 0, 30.0, 10.0, "nvml_counter", rank=0),
                                DeviceEnergy("gpu", 0, 50.0, 10.0, "nvml_counter", rank=1)), steps=100)
    assert energy.joules_per_step == pytest.approx(0.8) and energy.watts == pytest.approx(8.0)
    first, second = energy.per_device(samples_per_step=64, n_devices=2)
    assert first["joules_per_step"] == pytest.approx(0.3) and second["watts"] == pytest.approx(5.0)
    assert first["samples_per_joule"] == pytest.approx(32 / 0.3)
    assert second["samples_per_kwh"] == pytest.approx(32 / 0.5 * 3.6e6)


def test_cuda_ordinals_map_to_nvml_through_cuda_visible_devices():
    assert nvml_indices([0, 1], None) == [0, 1]
    assert nvml_indices([0, 1], "2,0") == [2, 0]
    assert nvml_indices([0], "GPU-8f3e") == ["GPU-8f3e"]
    assert nvml_indices([1], "3") == [None]  # not listed: no reading, never a crash
    meter = NvmlMeter([1], nvml=FakeNvml({3: 0}, {3: 0}), visible="3")  # type: ignore[arg-type]
    assert "GPU 1 is not among CUDA_VISIBLE_DEVICES=3" in meter.reason


class FailingMeter(NvmlMeter):
    def stop(self):
        raise NotSupported("the driver went away")


def test_a_meter_that_fails_mid_run_costs_the_energy_figures_not_the_timing():
    clock = FakeClock()
    nvml = FakeNvml({3: 0}, {3: 0})
    device = PoweredDevice(clock, nvml, watts=100.0, step_s=0.01)
    device.energy_meter = lambda: FailingMeter([0], nvml=nvml, clock=clock, visible="3")  # type: ignore
    measurement = measure(device, TINY, clock)
    assert measurement.n > 0 and measurement.energy is not None and measurement.energy.devices == ()
    assert "the energy meter failed: NotSupported: the driver went away" in measurement.energy.reason


def test_without_nvidia_ml_py_the_reason_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    meter = NvmlMeter([0])
    assert "nvidia-ml-py is not installed" in meter.reason and "parbench[energy]" in meter.reason
    meter.start()
    assert meter.stop() == []


def rapl_zone(root: Path, name: str, package: str, energy_uj: int, max_uj: int) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "name").write_text(package)
    (zone / "energy_uj").write_text(str(energy_uj))
    (zone / "max_energy_range_uj").write_text(str(max_uj))
    return zone


def test_rapl_reads_every_package_and_survives_a_wraparound(tmp_path):
    first = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5_000_000, 262_143_328_850)
    second = rapl_zone(tmp_path, "intel-rapl:1", "package-1", 262_143_000_000, 262_143_328_850)
    rapl_zone(tmp_path, "intel-rapl:0:0", "core", 1, 10)  # a part of package 0: not counted again
    seconds = iter([100.0, 102.0])
    meter = RaplMeter(tmp_path, clock=lambda: next(seconds))
    assert meter.reason == ""
    meter.start()
    (first / "energy_uj").write_text(str(5_000_000 + 30_000_000))  # 30 J
    (second / "energy_uj").write_text("671_150".replace("_", ""))  # wrapped: 328_850 + 671_150 uJ = 1 J
    readings = meter.stop()
    assert [(r.kind, r.device, r.method) for r in readings] == [("cpu", 0, "rapl"), ("cpu", 1, "rapl")]
    assert [r.joules for r in readings] == pytest.approx([30.0, 1.0])
    assert readings[0].watts == pytest.approx(15.0)


def test_rapl_delta_without_a_range_cannot_guess_a_wrap():
    assert rapl_delta_uj(10, 25, None) == 15
    with pytest.raises(ValueError):
        rapl_delta_uj(25, 10, None)


def test_rapl_zones_that_cannot_be_read_give_the_reason(tmp_path):
    assert "does not exist" in RaplMeter(tmp_path / "missing").reason
    assert "no RAPL package zone" in RaplMeter(tmp_path).reason
    zone = tmp_path / "intel-rapl:0"
    (zone / "energy_uj").mkdir(parents=True)  # unreadable as a number
    meter = RaplMeter(tmp_path)
    assert "not readable" in meter.reason and meter.zones == []


def test_root_only_rapl_files_give_the_way_out(tmp_path, monkeypatch):
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 1, 10)
    read_text = Path.read_text

    def refused(path: Path, *args, **kwargs) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refused)
    reason = RaplMeter(tmp_path).reason
    assert "readable by root only" in reason and "chmod a+r" in reason


def test_only_local_rank_0_reads_the_shared_cpu_packages(tmp_path):
    assert "local rank 0" in meter_for(DeviceKind.CPU, (), local_rank=1).reason
    assert "tpu" in meter_for(DeviceKind.TPU, ()).reason


class PretendCpuCase(PretendDevice):
    """A pretend device that runs a real CPU case: the default meter (RAPL on this machine)."""

    def __init__(self, clock: FakeClock, case: Case) -> None:
        super().__init__(clock, constant(0.01))
        self.case = case


@pytest.mark.skipif(Path("/sys/class/powercap").is_dir(), reason="this machine has a powercap tree")
def test_on_a_machine_without_counters_the_record_says_why_and_has_no_energy_figures(tmp_path):
    # An all-reduce counts no FLOP, so nothing looks a peak up (no framework is imported).
    case = Case.make("allreduce", "torch", "cpu", n_devices=2, params={"bytes": 4096})
    clock = FakeClock()
    measurement = measure(PretendCpuCase(clock, case), TINY, clock)
    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=TINY, label="here")
    context.store.ensure_writable()
    record = store_outcome(job_for(case), Outcome(Status.OK, measurement=measurement), context)
    (stored,) = ResultsStore(tmp_path).load()
    energy = stored.measurement.energy
    assert energy is not None and energy.devices == () and "/sys/class/powercap does not exist" in energy.reason
    assert not {"energy_j_per_step", "energy_watts", "gflop_per_joule"} & set(stored.metrics)
    assert "busbw_gbs" in record.metrics and "energy_per_device" not in stored.details


def test_parbench_devices_says_whether_energy_can_be_read(monkeypatch, capsys, tmp_path):
    import json

    from suites.cases.vocabulary import Framework
    from suites.frontends.cli import main
    from suites.hardware.devices import DeviceInfo

    monkeypatch.setattr("suites.measure.energy_meters.POWERCAP", tmp_path / "no-powercap")
    cpu = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 2, ("Some CPU",))
    monkeypatch.setattr("suites.frontends.commands.devices.discover_all", lambda: [cpu])
    assert main(["devices", "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert "no-powercap does not exist" in shown["energy_reason"]


def test_every_ranks_gpu_readings_reach_rank_0_in_rank_order():
    import threading

    from suites.measure.energy_meters import gather_energy
    from tests.test_memory import Rank, World

    own = {0: [DeviceEnergy("gpu", 0, 12.5, 2.0, "nvml_counter")],
           1: [DeviceEnergy("gpu", 1, 10.0, 2.0, "nvml_power")]}
    world, results = World(2), {}

    def run(rank: int) -> None:
        results[rank] = gather_energy(Rank(rank, world), own[rank], steps=10, reason="")

    threads = [threading.Thread(target=run, args=(rank,)) for rank in own]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    energy = results[0]
    assert [(d.rank, d.device, d.method) for d in energy.devices] == [(0, 0, "nvml_counter"), (1, 1, "nvml_power")]
    assert energy.joules_per_step == pytest.approx(2.25) and energy.watts == pytest.approx(11.25)
    assert results[1] == energy


def test_gpu_readiness_says_each_paths_energy_or_why_it_was_not_read():
    from suites.records.record import Record
    from suites.selfchecks.readiness import ReadinessPath, summarise

    case = Case.make("matmul", "torch", "gpu", params={"m": 64, "n": 64, "k": 64})
    path = ReadinessPath("matmul torch gpu:1 single fp32", case, expected=True, why="")

    def record(energy: EnergyMeasurement) -> Record:
        return Record(case, Status.OK, "r", "2026-01-01T00:00:00+00:00", "t", {},
                      measurement=Measurement(samples=(0.01,) * 5, energy=energy))

    read = summarise(path, record(EnergyMeasurement((DeviceEnergy("gpu", 0, 50.0, 2.0, "nvml_counter"),), 100)))
    assert read["energy"] == {"joules_per_step": 0.5, "watts": 25.0, "methods": ["nvml_counter"]}
    unread = summarise(path, record(EnergyMeasurement(reason="no GPU energy reading: nvidia-ml-py is not installed")))
    assert unread["energy"] == {"reason": "no GPU energy reading: nvidia-ml-py is not installed"}
    assert summarise(path, None, "budget spent")["energy"] is None


def test_ranks_sharing_a_gpu_count_its_energy_once_and_other_machines_gpus_count_too():
    """Issue 32, N7: two emulated ranks on GPU 0 each read its whole counter; summing them made
    the step's energy twice what the GPU used. GPU 0 of another node is another GPU."""
    from suites.records.energy_readings import DeviceEnergy, EnergyMeasurement
    from suites.measure.energy_meters import once_per_device

    shared = [DeviceEnergy("gpu", 0, 100.0, 1.0, "nvml_counter", rank=1),
              DeviceEnergy("gpu", 0, 101.0, 1.0, "nvml_counter", rank=0),
              DeviceEnergy("gpu", 0, 99.0, 1.0, "nvml_counter", rank=2, node=1)]
    kept = once_per_device(shared)
    assert [(r.rank, r.node) for r in kept] == [(0, 0), (2, 1)]
    assert EnergyMeasurement(kept, steps=10).joules_per_step == 20.0


def test_a_gpu_reading_names_the_gpu_by_its_nvml_index_whatever_cuda_visible_devices_says():
    """N16: under CUDA_VISIBLE_DEVICES=3 the process's cuda:0 is NVML's GPU 3."""
    from suites.measure.energy_meters import NvmlMeter

    class Nvml:
        def nvmlInit(self):
            pass

        def nvmlDeviceGetHandleByIndex(self, index):
            return ("handle", index)

        def nvmlDeviceGetIndex(self, handle):
            return handle[1]

        def nvmlDeviceGetTotalEnergyConsumption(self, handle):
            return 1000

        def nvmlDeviceGetPowerUsage(self, handle):
            return 100_000

    meter = NvmlMeter([0], nvml=Nvml(), visible="3")
    meter.start()
    assert [reading.device for reading in meter.stop()] == [3]
