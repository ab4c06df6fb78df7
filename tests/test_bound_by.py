"""The `bound_by` verdict of each case from synthetic evidence (one test per verdict), how a stored
record carries it, and the report's column, chart and summary of it."""
from __future__ import annotations

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.records.bound_by import BoundBy, Signals, diagnose, signals_of
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.gpu_telemetry import GpuTelemetry, Spread, Telemetry
from suites.report.load.parbench import row as record_row
from suites.report.render.html import render
from suites.report.analyses.prices import PriceTable
from suites.report.render.tables import whole
from suites.report.content import build_content
from suites.report.sections.base import ReportOptions
from tests.test_report_analysis import table


def gpu(sm_mhz: float, power_w: float = 300.0, reasons: tuple[str, ...] = (), utilization: float = 100.0,
        rank: int = 0) -> GpuTelemetry:
    return GpuTelemetry(0, 20, sm_clock_mhz=Spread(sm_mhz * 0.9, sm_mhz, sm_mhz), power_w=Spread(power_w, power_w,
                        power_w), utilization_pct=Spread(utilization, utilization, utilization), power_limit_w=700.0,
                        max_sm_clock_mhz=1980.0, reasons=reasons, rank=rank)


#: An H100's bf16 GEMM roof: 989 TFLOP/s at 1980 MHz, 3350 GB/s: the ridge at ~295 FLOP/B.
H100 = dict(roof_peak_tflops=989.0, roof_bandwidth_gbs=3350.0)


def test_a_gemm_held_at_its_power_cap_is_power_bound_with_clocks_and_power_as_evidence():
    verdict = diagnose(Signals("gpu", 1, 1e-3, tflops=695.0, arithmetic_intensity=2731.0, **H100,
                               kernel_s_per_step=0.99e-3, gpus=[gpu(1300.0, 699.0, ("sw_power_cap",))]))
    assert verdict.verdict == "power"
    assert verdict.evidence["clock_events"] == ["sw_power_cap"]
    assert verdict.evidence["sm_clock_share"] == pytest.approx(1300 / 1980)
    assert verdict.evidence["power_w"] == 699.0 and verdict.evidence["power_limit_w"] == 700.0
    assert "sw_power_cap" in verdict.reason


def test_the_same_clocks_without_a_power_reason_are_judged_on_the_roof_at_that_clock():
    # 600 TFLOP/s is 61% of the table's 989, but 92% of the 650 the GPU can reach at 1300 MHz.
    verdict = diagnose(Signals("gpu", 1, 1e-3, tflops=600.0, arithmetic_intensity=2731.0, **H100,
                               kernel_s_per_step=1e-3, gpus=[gpu(1300.0)]))
    assert verdict.verdict == "compute"
    assert verdict.evidence["roof_peak_tflops_at_clock"] == pytest.approx(989.0 * 1300 / 1980)
    assert verdict.evidence["roofline_fraction"] == pytest.approx(600 / (989.0 * 1300 / 1980))
    assert "at the clock it ran" in verdict.reason


def test_a_step_whose_kernels_keep_the_gpu_busy_a_small_share_is_launch_bound():
    verdict = diagnose(Signals("gpu", 1, 1e-3, tflops=0.07, peak_fraction=0.0001, kernel_s_per_step=0.15e-3,
                               gpus=[gpu(1980.0, 150.0)]))
    assert verdict.verdict == "launch"
    assert verdict.evidence["busy_share"] == pytest.approx(0.15)
    assert verdict.evidence["busy_share_from"] == "profiler kernel time / median step"
    assert "measures the host" in verdict.reason


def test_without_the_profiler_nvml_utilization_stands_in_for_the_busy_share():
    verdict = diagnose(Signals("gpu", 1, 1e-3, gpus=[gpu(1980.0, utilization=30.0)]))
    assert verdict.verdict == "launch" and verdict.evidence["busy_share_from"] == "NVML utilization (median)"


def test_a_step_mostly_spent_in_the_exchange_is_communication_bound():
    verdict = diagnose(Signals("cpu", 2, 0.1, tflops=0.01, peak_fraction=0.1, exchange_share=0.7))
    assert verdict.verdict == "communication" and verdict.evidence["exchange_share"] == 0.7


def test_left_of_the_ridge_near_the_bandwidth_roof_is_memory_bound():
    # 10 FLOP/B x 3350 GB/s = 33.5 TFLOP/s possible; 30 achieved.
    verdict = diagnose(Signals("gpu", 1, 1e-3, tflops=30.0, arithmetic_intensity=10.0, **H100,
                               kernel_s_per_step=1e-3, gpus=[gpu(1980.0)]))
    assert verdict.verdict == "memory"
    assert verdict.evidence["roofline_fraction"] == pytest.approx(30 / 33.5)


def test_cpu_kernels_are_judged_by_the_roofline_alone():
    signals = dict(roof_peak_tflops=1.0, roof_bandwidth_gbs=20.0)  # ridge at 50 FLOP/B
    assert diagnose(Signals("cpu", 1, 1e-3, tflops=0.8, arithmetic_intensity=170.0, **signals)).verdict == "compute"
    far = diagnose(Signals("cpu", 1, 1e-3, tflops=0.1, arithmetic_intensity=170.0, **signals))
    assert far.verdict == "unknown" and "not near it" in far.reason and far.evidence["roofline_fraction"] == 0.1


def test_unknown_says_what_is_missing():
    no_flops = diagnose(Signals("cpu", 1, 1e-3))
    assert no_flops.verdict == "unknown" and "counts no FLOP" in no_flops.reason
    no_peak = diagnose(Signals("gpu", 1, 1e-3, tflops=10.0))
    assert no_peak.verdict == "unknown" and "no peak" in no_peak.reason
    no_bandwidth = diagnose(Signals("cpu", 1, 1e-3, tflops=0.1, peak_fraction=0.2, arithmetic_intensity=170.0))
    assert "`parbench calibrate`" in no_bandwidth.reason and no_bandwidth.evidence["peak_fraction_at_clock"] == 0.2


def test_a_record_keeps_its_verdict_and_signals_come_from_its_measurement_and_metrics():
    case = Case.make("matmul", "torch", "gpu", precision="bf16", params={"m": 8192, "n": 8192, "k": 8192})
    measurement = Measurement((1.6e-3,) * 5, telemetry=Telemetry((gpu(1300.0, 699.0, ("sw_power_cap",)),), 1.58e-3))
    signals = signals_of(case, measurement, {"tflops": 687.0, "pct_peak_table": 69.5, "arithmetic_intensity": 2731.0,
                                             "roof_peak_tflops": 989.0, "roof_bandwidth_gbs": 3350.0})
    assert signals.peak_fraction == pytest.approx(0.695) and signals.kernel_s_per_step == 1.58e-3
    verdict = diagnose(signals)
    record = Record(case, Status.OK, "r1", "2026-11-24T00:00:00+00:00", "gpu", {"machine": "h100"},
                    measurement=measurement, bound_by=verdict)
    again = Record.from_dict(record.to_dict())
    assert again.bound_by == verdict and again.bound_by.verdict == "power"
    assert BoundBy.from_dict(verdict.to_dict()) == verdict


def test_the_report_shows_the_verdicts_and_its_summary_names_host_bound_and_power_capped_figures():
    power = Record(Case.make("matmul", "torch", "gpu", precision="bf16", params={"m": 8192, "n": 8192, "k": 8192}),
                   Status.OK, "r1", "2026-11-24T00:00:00+00:00", "gpu", {"machine": "h100"},
                   measurement=Measurement((1.6e-3,) * 9,
                                           telemetry=Telemetry((gpu(1300.0, 699.0, ("sw_power_cap",)),))),
                   bound_by=BoundBy("power", "clocks held at 66% of their maximum with sw_power_cap seen"))
    launch = Record(Case.make("train_step", "torch", "gpu", params={"model": "mlp", "batch": 32}),
                    Status.OK, "r1", "2026-11-24T00:00:00+00:00", "training", {"machine": "h100"},
                    measurement=Measurement((1e-3,) * 9, telemetry=Telemetry((gpu(1980.0, 150.0),), 1e-4)),
                    bound_by=BoundBy("launch", "the gpu was busy 10% of the step", {"busy_share": 0.1}))
    frame = table(*(record_row(record, __file__) for record in (power, launch)))
    assert list(frame["bound_by"]) == ["power", "launch"] and frame["gpu_power_w"].tolist() == [699.0, 150.0]
    content = build_content(frame, ReportOptions(PriceTable.load()))
    (summary,) = [s for s in content.sections if s.anchor == "summary"]
    text = " ".join(summary.text)
    assert "Launch-bound (1)" in text and "this figure measures the host, not the GPU" in text
    assert "Power-capped (1)" in text and "matmul k=8192" in text
    (limits,) = [s for s in content.sections if s.anchor == "limits"]
    assert len(limits.figures) == 1
    html = render(content, "t", 1, [])
    assert "What limits each figure" in html and "sw_power_cap" in html
    assert "the gpu was busy 10% of the step" in html
    problem = next(p for p in content.problems if p.title.startswith("train_step"))
    headers = whole(problem.tables[0]).headers
    assert "bound by" in problem.tables[0].headers, problem.tables[0].headers
    assert "GPU power" in headers and "SM MHz" in headers


def test_no_profiled_kernels_is_no_evidence_of_an_idle_gpu_and_nccl_waiting_is_not_work():
    """Issue 32, N10."""
    from suites.frameworks.torch.profiling import is_collective_kernel
    from suites.records.bound_by import Signals, busy_share

    assert busy_share(Signals(device="gpu", n_devices=1, median_s=1e-3, kernel_s_per_step=0.0)) == (None, "")
    assert is_collective_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert not is_collective_kernel("ampere_sgemm_128x64_tn")
