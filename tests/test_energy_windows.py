"""Energy read over windows long enough to be true, and flagged where a reading cannot be: a window
shorter than 20 updates of its counter, or a power above the board's limit — in new readings (the
meter records the update period and the enforced limit) and in older records (their environment's
nvidia-smi limit), the H100 sample's 856 W on a 700 W board among them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from suites.cases.timing_config import TimingConfig
from suites.measure.energy_meters import NvmlMeter, RaplMeter
from suites.measure.timing import measure
from suites.records.energy_readings import (OVER_LIMIT, SHORT_WINDOW, UPDATE_PERIOD_S, DeviceEnergy,
                                            EnergyMeasurement, min_window_s, power_limits)
from suites.records.measurement import Measurement
from suites.records.metric_registry import ENERGY_FLAGS
from tests.test_energy import FakeNvml, PoweredDevice
from tests.test_timing import FakeClock

H100_READINESS = Path("/work/shared/sample-records/h100-2026-11-24/r1-readiness.jsonl")


class LimitedNvml(FakeNvml):
    """A fake NVML whose boards enforce a power limit (milliwatts, as NVML says it)."""

    def __init__(self, *args, limit_mw: int = 700_000) -> None:
        super().__init__(*args)
        self.limit_mw = limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle) -> int:
        return self.limit_mw


def test_the_shortest_true_window_is_twenty_updates_of_the_counter():
    assert min_window_s("nvml_counter") == pytest.approx(2.0)  # NVML's counter: ~100 ms an update
    assert min_window_s("rapl") == pytest.approx(0.02)
    assert min_window_s("nvml_power") == pytest.approx(20.0)  # a 1 s running average
    assert set(ENERGY_FLAGS) == {SHORT_WINDOW, OVER_LIMIT}


def measured(budget_s: float) -> Measurement:
    """A 650 W GPU case of 10 ms steps on a 700 W board, timed briefly (converged in ~0.1 s)."""
    clock = FakeClock()
    device = PoweredDevice(clock, LimitedNvml({3: 1_000_000}, {3: 0}), watts=650.0, step_s=0.01)
    config = TimingConfig(warmup_s=0.02, min_warmup_steps=1, block_min_s=0.002, min_samples=10, min_time_s=0.04,
                          budget_s=budget_s)
    return measure(device, config, clock)


def test_the_meter_reads_a_short_case_over_two_seconds_of_the_same_step():
    measurement = measured(budget_s=4.0)
    (reading,) = measurement.energy.devices
    assert measurement.timed_s < 0.5 <= 2.0 <= reading.seconds  # timed briefly, read long enough
    assert measurement.energy.steps * 0.01 == pytest.approx(reading.seconds)  # every step of the window
    assert measurement.energy.joules_per_step == pytest.approx(6.5)
    assert (reading.power_limit_w, reading.update_period_s) == (700.0, UPDATE_PERIOD_S["nvml_counter"])
    assert reading.flags == () and measurement.energy.ratio_ok
    stored = measurement.to_dict()["energy"]
    assert stored["flags"] == [] and stored["devices"][0]["min_window_s"] == pytest.approx(2.0)
    assert Measurement.from_dict(measurement.to_dict()).energy == measurement.energy


def test_a_window_the_budget_cut_short_is_flagged_not_dropped():
    energy = measured(budget_s=0.15).energy
    (reading,) = energy.devices
    assert reading.seconds < 2.0 and energy.flags == (SHORT_WINDOW,) and not energy.ratio_ok
    assert energy.joules_per_step == pytest.approx(6.5)  # kept: the figure is there, flagged


def test_a_power_over_the_boards_limit_is_flagged():
    over = DeviceEnergy("gpu", 0, joules=856.0 * 4, seconds=4.0, method="nvml_counter", power_limit_w=700.0)
    under = DeviceEnergy("gpu", 1, joules=695.0 * 4, seconds=4.0, method="nvml_counter", power_limit_w=700.0)
    assert over.flags == (OVER_LIMIT,) and under.flags == ()
    both = EnergyMeasurement((over, under), steps=100)
    assert both.flags == (OVER_LIMIT,) and not both.ratio_ok
    assert EnergyMeasurement.from_dict(json.loads(json.dumps(both.to_dict()))) == both


def test_a_cpu_package_has_no_limit_and_a_millisecond_counter(tmp_path):
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "energy_uj").write_text("1000000")
    ticks = iter([0.0, 1.0])
    meter = RaplMeter(tmp_path, clock=lambda: next(ticks))
    assert meter.min_window_s == pytest.approx(0.02)
    meter.start()
    (zone / "energy_uj").write_text("51000000")
    (reading,) = meter.stop()
    assert (reading.power_limit_w, reading.update_period_s, reading.flags) == (None, 0.001, ())


def test_an_nvml_meter_wants_the_longest_window_of_its_gpus():
    nvml = LimitedNvml({0: 5, 1: None}, {0: 100_000, 1: 100_000})  # GPU 1 has no energy counter
    meter = NvmlMeter([0, 1], nvml=nvml, visible="0,1")
    assert meter.methods == ("nvml_counter", "nvml_power") and meter.min_window_s == pytest.approx(20.0)


def test_an_older_record_is_checked_against_its_environments_power_limit():
    old = {"devices": [{"kind": "gpu", "device": 0, "joules": 214.0, "seconds": 0.25, "method": "nvml_counter"}],
           "steps": 9025}
    energy = EnergyMeasurement.from_dict(old)
    assert energy.flags == (SHORT_WINDOW,)  # no limit recorded, but the window says enough
    limits = power_limits({"gpus": [{"index": 0, "power_limit_w": 700.0}, {"index": 1, "power_limit_w": None}]})
    assert limits == {0: 700.0}
    assert energy.with_power_limits(limits).flags == (SHORT_WINDOW, OVER_LIMIT)  # 856 W on a 700 W board


@pytest.mark.skipif(not H100_READINESS.exists(), reason="the H100 sample records are not here")
def test_the_h100_samples_856_w_reading_is_flagged_on_both_counts():
    for line in H100_READINESS.read_text().splitlines():
        record = json.loads(line)
        if record["case"]["id"] == "matmul/torch/gpu:1/single/bf16/k=2048,m=2048,n=2048":
            energy = EnergyMeasurement.from_dict(record["measurement"]["energy"])
            flagged = energy.with_power_limits(power_limits(record["environment"]))
            (reading,) = flagged.devices
            assert reading.watts == pytest.approx(856, abs=1) and reading.power_limit_w == 700.0
            assert flagged.flags == (SHORT_WINDOW, OVER_LIMIT) and not flagged.ratio_ok
            return
    pytest.fail("the H100 sample's bf16 2048 matmul record is missing")
