"""Issue 48 item 6: a GPU peak is scaled from the clock it assumes (peaks.toml `clock_mhz`, with
its source), not from NVML's maximum SM clock: an H100 SXM at its rated 1,830 MHz is not `power`,
and its roof is the table's 989 TFLOP/s, not 8% under it."""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework
from suites.hardware.devices import DeviceInfo
from suites.hardware.peaks import PeakTable
from suites.records.bound_by import diagnose, signals_of
from suites.records.gpu_telemetry import GpuTelemetry, Spread, Telemetry
from suites.records.measurement import Measurement
from tests.cluster_truth import eight_gpus_a_node  # noqa: F401 (fixture)

GEMM = Case.make("matmul", "torch", "gpu", precision="bf16", params={"m": 8192, "n": 8192, "k": 8192})


def h100_at(sm_mhz: float, reasons: tuple[str, ...] = ()) -> Measurement:
    """A GEMM's measurement on an H100 SXM whose SM clock held at `sm_mhz` (NVML's max: 1,980 MHz)."""
    gpu = GpuTelemetry(0, 20, sm_clock_mhz=Spread(sm_mhz, sm_mhz, sm_mhz), power_w=Spread(690.0, 690.0, 690.0),
                       power_limit_w=700.0, max_sm_clock_mhz=1980.0, reasons=reasons)
    return Measurement((1.6e-3,) * 5, telemetry=Telemetry((gpu,)))


ROOF = {"tflops": 700.0, "pct_peak_table": 70.8, "arithmetic_intensity": 2731.0, "roof_peak_tflops": 989.4,
        "roof_bandwidth_gbs": 3350.0}


def test_an_h100_at_its_rated_clock_under_a_power_cap_is_compute_bound_at_the_full_roof(eight_gpus_a_node):
    verdict = diagnose(signals_of(GEMM, h100_at(1830.0, ("sw_power_cap",)), ROOF))
    assert verdict.verdict == "compute", verdict.reason  # before: "power", clocks at 92% of 1,980 MHz
    assert verdict.evidence["roof_peak_tflops_at_clock"] == pytest.approx(989.4)  # before: 914.5
    assert verdict.evidence["peak_clock_mhz"] == 1830.0 and verdict.evidence["max_sm_clock_mhz"] == 1980.0


def test_clocks_held_under_the_peaks_own_clock_are_still_power(eight_gpus_a_node):
    verdict = diagnose(signals_of(GEMM, h100_at(1300.0, ("sw_power_cap",)), ROOF))
    assert verdict.verdict == "power" and "of the clock its peak assumes" in verdict.reason


@pytest.mark.parametrize("name, clock", [("NVIDIA H100 80GB HBM3", 1830.0), ("NVIDIA H200", 1830.0),
                                         ("NVIDIA H100 PCIe", 1620.0), ("NVIDIA A100-SXM4-80GB", 1410.0)])
def test_the_peak_rows_say_the_clock_their_tensor_figures_assume_and_where_from(name, clock):
    table = PeakTable.load()
    device = DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, (name,))
    entry = table.entry_for(device)
    assert table.clock_mhz(device) == clock and "NVIDIA" in entry["clock_source"]
    sms, flop_per_clock = ((108, 2048) if "A100" in entry["match"] else (114, 4096) if "PCIe" in entry["match"]
                           else (132, 4096))
    assert entry["bf16"] == pytest.approx(sms * flop_per_clock * clock / 1e6, rel=2e-3)  # the figure is its clock's
