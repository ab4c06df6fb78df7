"""The timer's instruments behind one interface (`suites.measure.instruments`): started, stopped and
recorded as one loop; a failing one costs its own figures only (an essential one fails the case and
leaves none running); one whose counter needs a longer window reads over untimed blocks of the
same step. Asserted on a controlled clock (`tests.test_timing`)."""
from __future__ import annotations

from typing import Any

import pytest

from suites.cases.timing_config import TimingConfig
from suites.measure.cpu_meter import CpuMeter
from suites.measure.energy_meters import EnergyMeter, NoMeter
from suites.measure.instruments import CUT_SHORT, TIMED_BLOCKS, Instrument, Instruments, Window
from suites.measure.memory_probes import MemoryProbe
from suites.measure.telemetry_sampler import TelemetrySampler
from suites.measure.timing import measure
from suites.records.peak_memory import MemoryPeak
from tests.test_timing import FAST, FakeClock, PretendDevice, constant


class Notebook(Instrument):
    """Notes the device's step count at each start and stop; records the steps its window spans."""

    what = "the notebook"

    def __init__(self, device: PretendDevice, wants_s: float = 0.0, fails: str = "") -> None:
        self.device, self.wants_s, self.fails, self.calls = device, wants_s, fails, []

    @property
    def min_window_s(self) -> float:
        return self.wants_s

    def start(self) -> None:
        if self.fails == "start":
            raise OSError("counter gone")
        self.calls.append(("start", self.device.steps))

    def stop(self) -> int:
        self.calls.append(("stop", self.device.steps))
        return self.device.steps

    def record(self, runnable: Any, readings: Any, window: Window, failure: str = "") -> dict[str, Any]:
        self.recorded = (readings, window, failure)
        return {}


class Instrumented(PretendDevice):
    """A pretend device whose energy meter is the test's instrument (no probe, no sampler)."""

    def __init__(self, clock: FakeClock, step_s: float, meter: Instrument) -> None:
        super().__init__(clock, constant(step_s))
        self.meter = meter

    def energy_meter(self) -> Any:
        return self.meter


def test_every_meter_is_an_instrument():
    for kind in (EnergyMeter, TelemetrySampler, MemoryProbe, CpuMeter):
        assert issubclass(kind, Instrument), kind


def test_an_instrument_reads_the_timed_blocks_only():
    clock = FakeClock()
    device = Instrumented(clock, 0.002, None)  # type: ignore[arg-type]
    device.meter = notebook = Notebook(device)
    measurement = measure(device, FAST, clock)
    (start, started_at), (stop, stopped_at) = notebook.calls
    assert (start, stop) == ("start", "stop")
    timed = measurement.n * measurement.block_size
    assert started_at == measurement.warmup_steps and stopped_at - started_at == timed
    readings, window, failure = notebook.recorded
    assert window == Window(timed, measurement.block_size) and window.span == TIMED_BLOCKS and failure == ""


def test_an_instrument_that_fails_costs_its_figures_not_the_timing():
    clock = FakeClock()
    device = Instrumented(clock, 0.002, None)  # type: ignore[arg-type]
    device.meter = notebook = Notebook(device, fails="start")
    measurement = measure(device, FAST, clock)
    assert measurement.n >= FAST.min_samples  # timed all the same
    readings, _, failure = notebook.recorded
    assert readings is None and failure == "the notebook failed: OSError: counter gone"
    assert notebook.calls == []  # never stopped what never started


def test_an_energy_meter_that_fails_says_so_in_the_record():
    class Broken(NoMeter):
        def start(self) -> None:
            raise RuntimeError("NVML gone")

    clock = FakeClock()
    measurement = measure(Instrumented(clock, 0.002, Broken("")), FAST, clock)
    assert not measurement.energy.measured
    assert measurement.energy.reason == "the energy meter failed: RuntimeError: NVML gone"


class FailingProbe(MemoryProbe):
    def start(self) -> None:
        raise RuntimeError("allocator gone")

    def stop(self) -> list[MemoryPeak]:
        return []


def test_an_essential_instrument_fails_the_case_and_leaves_none_running():
    clock = FakeClock()

    class Probed(Instrumented):
        def memory_probe(self) -> MemoryProbe:
            return FailingProbe()

    device = Probed(clock, 0.002, None)  # type: ignore[arg-type]
    device.meter = notebook = Notebook(device)
    with pytest.raises(RuntimeError, match="allocator gone"):
        measure(device, FAST, clock)
    assert notebook.calls == []  # the probe failed first; nothing was left started


def test_a_step_that_raises_stops_the_instruments_it_started():
    clock = FakeClock()

    class Crashing(Instrumented):
        def step(self) -> None:
            if self.steps == 40:
                raise RuntimeError("device lost")
            super().step()

    device = Crashing(clock, 0.002, None)  # type: ignore[arg-type]
    device.meter = notebook = Notebook(device)
    with pytest.raises(RuntimeError, match="device lost"):
        measure(device, FAST, clock)
    assert [name for name, _ in notebook.calls] == ["start", "stop"]


def topped_up(wants_s: float) -> tuple[Any, Notebook, TimingConfig]:
    """A measurement of 10 ms steps by a timer whose instrument wants `wants_s` of window."""
    clock = FakeClock()
    device = Instrumented(clock, 0.01, None)  # type: ignore[arg-type]
    device.meter = notebook = Notebook(device, wants_s=wants_s)
    config = TimingConfig(warmup_s=0.01, block_min_s=0.01, budget_s=4.0, min_time_s=0.1)
    return measure(device, config, clock), notebook, config


def test_an_instrument_that_wants_a_longer_window_reads_untimed_blocks_of_the_same_step():
    measurement, notebook, _ = topped_up(2.0)
    timed = measurement.n * measurement.block_size
    (_, started_at), (_, stopped_at) = notebook.calls
    readings, window, _ = notebook.recorded
    assert measurement.timed_s < 2.0 and window.steps == stopped_at - started_at > timed
    assert window.steps * 0.01 == pytest.approx(2.0, abs=0.011 * measurement.block_size)
    assert measurement.timed_s == pytest.approx(timed * 0.01)  # the timed figures are the timed blocks'


def test_the_window_it_wants_is_topped_up_by_at_most_a_budget():
    measurement, notebook, config = topped_up(60.0)
    _, window, _ = notebook.recorded
    assert window.steps * 0.01 < measurement.timed_s + config.budget_s + 0.011 * measurement.block_size


def test_a_case_cut_short_records_the_warm_up_instruments_over_its_warm_steps_and_the_others_as_absent():
    clock = FakeClock()
    device = Instrumented(clock, 2.0, None)  # type: ignore[arg-type]
    device.meter = notebook = Notebook(device)
    measurement = measure(device, TimingConfig(warmup_s=0.0, budget_s=1.0), clock)
    assert measurement.cut_short
    assert notebook.calls == [] and notebook.recorded[0] is None  # never started: no timed blocks
    assert measurement.cpu is None or measurement.cpu.span == CUT_SHORT


def test_instruments_stop_only_those_whose_window_is_long_enough():
    class Device:
        steps = 0

    short, long = Notebook(Device()), Notebook(Device(), wants_s=5.0)
    group = Instruments([short, None, long])
    group.start()
    assert group.wanted_s() == 5.0
    group.stop(10, elapsed_s=1.0)
    assert [name for name, _ in short.calls] == ["start", "stop"] and len(long.calls) == 1
    assert group.wanted_s() == 5.0
    group.stop(30)
    assert group.wanted_s() == 0.0
    group.record(None, block_size=2)  # type: ignore[arg-type]
    assert short.recorded[1].steps == 10 and long.recorded[1].steps == 30
