"""GPU telemetry over the timed blocks: the NVML sampler (through a fake pynvml with controlled
readings), its min/median/max aggregation, the clock-event reasons it decodes, how the timer
stores it, and how every rank's readings reach rank 0."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from suites.records.measurement import Measurement
from suites.records.gpu_telemetry import GpuTelemetry, Spread, Telemetry, burst_gain, reason_names
from suites.measure.telemetry_sampler import GpuSampler, busy_length, gather_telemetry
from suites.measure.timing import measure
from tests.test_energy import TINY, NotSupported
from tests.test_memory import Rank, World
from tests.test_timing import FakeClock, PretendDevice, constant


class FakeNvml:
    """The part of pynvml the sampler calls. Each GPU (by NVML index) answers from lists of
    readings, one per sample, the last repeated; a reading missing from `readings` raises
    NotSupported, as pynvml does for a query the GPU does not answer."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, readings: dict[int, dict[str, list[float]]], limit_mw: int = 700_000,
                 max_sm_mhz: int = 1980) -> None:
        self.readings, self.limit_mw, self.max_sm_mhz = readings, limit_mw, max_sm_mhz
        self.calls: dict[tuple[int, str], int] = {}

    def _next(self, handle: SimpleNamespace, name: str) -> float:
        values = self.readings[handle.index].get(name)
        if values is None:
            raise NotSupported(name)
        count = self.calls.get((handle.index, name), 0)
        self.calls[(handle.index, name)] = count + 1
        return values[min(count, len(values) - 1)]

    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        if index not in self.readings:
            raise NotSupported(f"no GPU {index}")
        return SimpleNamespace(index=index)

    def nvmlDeviceGetClockInfo(self, handle: SimpleNamespace, clock: int) -> float:
        return self._next(handle, "sm" if clock == self.NVML_CLOCK_SM else "mem")

    def nvmlDeviceGetMaxClockInfo(self, handle: SimpleNamespace, clock: int) -> int:
        return self.max_sm_mhz

    def nvmlDeviceGetPowerUsage(self, handle: SimpleNamespace) -> float:
        return self._next(handle, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimpleNamespace) -> int:
        return self.limit_mw

    def nvmlDeviceGetTemperature(self, handle: SimpleNamespace, sensor: int) -> float:
        return self._next(handle, "temperature")

    def nvmlDeviceGetUtilizationRates(self, handle: SimpleNamespace) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._next(handle, "utilization"), memory=0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: SimpleNamespace) -> int:
        return int(self._next(handle, "events"))


#: A GEMM running into its power cap. Each list's first reading is the one the sampler takes when
#: it is made, to learn which readings the GPU answers (not a sample).
POWER_CAPPED = {"sm": [1755, 1980, 1410, 1100, 1200], "mem": [2619],
                "power_mw": [300_000, 450_000, 699_000, 701_000, 700_000],
                "temperature": [40, 48, 61, 66, 64], "utilization": [0, 100], "events": [0x0, 0x4, 0x4, 0x4]}


def sampled(nvml: FakeNvml, samples: int, ordinals: tuple[int, ...] = (0,),
            visible: str = "0,1,2,3") -> list[GpuTelemetry]:
    """`samples` samples: start's, stop's and those between, taken without the thread's timing."""
    sampler = GpuSampler(ordinals, nvml=nvml, interval_s=3600, visible=visible)  # type: ignore[arg-type]
    sampler.start()
    for _ in range(samples - 2):
        sampler._sample()
    return sampler.stop()


def test_clock_event_masks_decode_to_names():
    assert reason_names(0x4) == ("sw_power_cap",)
    assert reason_names(0x1 | 0x4 | 0x40) == ("gpu_idle", "sw_power_cap", "hw_thermal")
    assert reason_names(0) == ()
    assert reason_names(0x4 | 0x10000) == ("sw_power_cap", "0x10000")  # a bit newer than this table


def test_sampler_keeps_min_median_max_of_each_reading_and_every_reason_seen():
    (gpu,) = sampled(FakeNvml({3: POWER_CAPPED}), 4, visible="3")
    assert gpu.samples == 4 and gpu.device == 0
    assert gpu.sm_clock_mhz == Spread(1100, 1305, 1980)
    assert gpu.power_w == Spread(450.0, 699.5, 701.0)
    assert gpu.temperature_c == Spread(48, 62.5, 66)
    assert gpu.power_limit_w == 700.0 and gpu.max_sm_clock_mhz == 1980.0
    assert gpu.reasons == ("sw_power_cap",) and gpu.limited_by == ("sw_power_cap",)
    assert gpu.sm_clock_share == pytest.approx(1305 / 1980)
    assert gpu.power_share == pytest.approx(699.5 / 700)


def test_a_reading_the_gpu_does_not_answer_is_left_out_never_zero():
    readings = {name: values for name, values in POWER_CAPPED.items() if name not in ("temperature", "utilization")}
    (gpu,) = sampled(FakeNvml({0: readings}), 3)
    assert gpu.temperature_c is None and gpu.utilization_pct is None
    assert gpu.sm_clock_mhz is not None
    stored = gpu.to_dict()
    assert stored["temperature_c"] is None and GpuTelemetry.from_dict(stored) == gpu


def test_drivers_before_535_name_the_reasons_throttle_reasons():
    class OldNvml(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: SimpleNamespace) -> int:
            return 0x20

    (gpu,) = sampled(OldNvml({0: POWER_CAPPED}), 2)
    assert gpu.reasons == ("sw_thermal",)


def test_without_a_gpu_nvml_knows_the_reason_says_so():
    sampler = GpuSampler([0], nvml=FakeNvml({}), visible="0")  # type: ignore[arg-type]
    assert sampler.reason.startswith("no GPU telemetry") and "no NVML handle" in sampler.reason
    sampler.start()
    assert sampler.stop() == []


class SampledDevice(PretendDevice):
    """A pretend GPU whose NVML readings the fake serves; profiled kernels take `busy_s` a step."""

    def __init__(self, clock: FakeClock, nvml: FakeNvml, busy_s: float) -> None:
        super().__init__(clock, constant(0.01))
        self.nvml, self.busy_s = nvml, busy_s

    def telemetry_sampler(self) -> GpuSampler:
        return GpuSampler([0], nvml=self.nvml, interval_s=3600, visible="0")  # type: ignore[arg-type]

    def kernel_seconds_per_step(self, steps: int) -> float:
        return self.busy_s


def test_the_timer_stores_the_timed_blocks_telemetry_and_kernel_time_in_the_record():
    clock = FakeClock()
    measurement = measure(SampledDevice(clock, FakeNvml({0: POWER_CAPPED}), busy_s=0.002), TINY, clock)
    telemetry = measurement.telemetry
    assert telemetry is not None and telemetry.reason == "" and telemetry.kernel_s_per_step == 0.002
    (gpu,) = telemetry.gpus
    assert gpu.samples == 2  # at the first timed block's start and the last one's end
    assert gpu.sm_clock_mhz == Spread(1410, 1695, 1980)
    assert Measurement.from_dict(measurement.to_dict()).telemetry == telemetry


def test_a_cpu_case_says_why_it_has_no_gpu_telemetry():
    clock = FakeClock()
    telemetry = measure(PretendDevice(clock, constant(0.01)), TINY, clock).telemetry
    assert telemetry is not None and telemetry.gpus == () and "no case" in telemetry.reason


def test_every_ranks_gpu_telemetry_reaches_rank_0_with_the_slowest_kernel_time():
    own = {0: [GpuTelemetry(0, 5, sm_clock_mhz=Spread(1100, 1300, 1400), power_w=Spread(690, 700, 702),
                            power_limit_w=700, max_sm_clock_mhz=1980, reasons=("sw_power_cap",))],
           1: [GpuTelemetry(0, 4, sm_clock_mhz=Spread(1900, 1950, 1980), max_sm_clock_mhz=1980)]}
    kernels = {0: 0.004, 1: 0.006}
    world, results = World(2), {}

    def run(rank: int) -> None:
        results[rank] = gather_telemetry(Rank(rank, world), own[rank], "", kernels[rank])

    threads = [threading.Thread(target=run, args=(rank,)) for rank in own]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    telemetry = results[0]
    assert telemetry == results[1]
    assert [(gpu.rank, gpu.samples, gpu.reasons) for gpu in telemetry.gpus] == [(0, 5, ("sw_power_cap",)), (1, 4, ())]
    assert telemetry.gpus[0].power_w == Spread(690, 700, 702) and telemetry.gpus[1].power_w is None
    assert telemetry.kernel_s_per_step == 0.006


def test_burst_gain_is_reported_only_beyond_the_spread():
    settled = [0.010, 0.010, 0.0101, 0.0099]
    assert burst_gain([0.008, *settled], noise=0.05) == pytest.approx(0.25)  # the first block 25% faster
    assert burst_gain([0.0098, *settled], noise=0.05) is None  # within the noise
    assert burst_gain([0.008, 0.01], noise=0.05) is None  # too few blocks to tell
    assert Telemetry.from_dict(Telemetry(reason="why").to_dict()) == Telemetry(reason="why")


def test_kernel_busy_time_counts_overlapping_kernels_once():
    assert busy_length([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert busy_length([]) == 0
