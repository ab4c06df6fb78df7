"""Peaks are upper bounds: a CPU's peak uses the highest clock a core reaches (cpufreq, else
unknown) and the FLOP per cycle of its microarchitecture (else unknown); a figure above a peak
is flagged `above_peak`, so "% of peak" is never over 100 without saying the peak is wrong; and
the data rows corrected against their sources. No GPU and no cpufreq needed: fake sysfs trees,
synthetic /proc/cpuinfo texts."""
from __future__ import annotations

from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.user_files import shipped_table
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Status
from suites.hardware import peaks
from suites.hardware.devices import DeviceInfo, cpu_microarchitecture
from suites.hardware.peaks import PEAKS_ENV, PeakTable, cpu_clock_ghz, save_calibration
from suites.records import metrics as metrics_module
from suites.records.measurement import Measurement
from suites.records.metric_registry import ABOVE_PEAK, PCT_OF_PEAK
from suites.records.store import ResultsStore, check
from suites.runner.runner import RunContext, Runner
from suites.runner.execute import Outcome
from tests.report_support import TINY

ZEN5 = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("AMD EPYC",),
                  details={"isa": ["avx2", "fma", "avx512f", "avx512_bf16"], "uarch": "zen5", "usable_cores": 2})
MATMUL = Case.make("matmul", "torch", "cpu", params={"m": 512, "n": 512, "k": 512})
FLOPS = 2 * 512**3


@pytest.fixture
def table(monkeypatch) -> PeakTable:
    monkeypatch.delenv(PEAKS_ENV, raising=False)
    return PeakTable.load()


# --- the highest clock ------------------------------------------------------------------------------

def sysfs(tmp_path: Path, khz: dict[int, str]) -> Path:
    for cpu, value in khz.items():
        folder = tmp_path / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "cpuinfo_max_freq").write_text(value + "\n")
    return tmp_path


def test_the_clock_is_the_highest_any_usable_core_reaches(tmp_path):
    root = sysfs(tmp_path, {0: "3700000", 1: "5000000", 2: "5200000"})
    assert cpu_clock_ghz(root, cpus=[0, 1]) == pytest.approx(5.0)  # cpu2 is not this process's
    assert cpu_clock_ghz(root, cpus=[0]) == pytest.approx(3.7)


def test_without_cpufreq_the_clock_is_unknown_not_the_base_clock(tmp_path):
    assert cpu_clock_ghz(tmp_path, cpus=[0, 1]) is None  # no cpufreq: /proc/cpuinfo's MHz is no bound
    assert cpu_clock_ghz(sysfs(tmp_path, {0: "garbage", 1: "0"}), cpus=[0, 1]) is None


# --- FLOP per cycle by microarchitecture -------------------------------------------------------------

def cpuinfo(vendor: str, family: int, model: int, name: str, flags: str) -> str:
    block = (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
             f"model name\t: {name}\ncpu MHz\t\t: 2596.096\nflags\t\t: {flags}\n")
    return block + "\n" + block.replace("processor\t: 0", "processor\t: 1")


AVX512 = "fpu sse avx avx2 fma avx512f avx512bw"


@pytest.mark.parametrize("text, uarch", [
    (cpuinfo("AuthenticAMD", 26, 2, "AMD EPYC", AVX512 + " avx512_bf16"), "zen5"),  # this project's VM
    (cpuinfo("AuthenticAMD", 25, 17, "AMD EPYC 9654 96-Core Processor", AVX512 + " avx512_bf16"), "zen4"),
    (cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core Processor", "avx avx2 fma"), "zen3"),
    (cpuinfo("AuthenticAMD", 23, 49, "AMD EPYC 7B12", "avx avx2 fma"), "zen2"),
    (cpuinfo("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8481C", AVX512 + " amx_bf16"), "sapphirerapids"),
    (cpuinfo("GenuineIntel", 6, 106, "Intel(R) Xeon(R) Platinum 8375C", AVX512), "icelake_server"),
    (cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", AVX512), "skylake_avx512_two_fma"),
    (cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz", AVX512), "skylake_avx512_one_fma"),
    (cpuinfo("GenuineIntel", 6, 140, "11th Gen Intel(R) Core(TM) i7-1185G7", AVX512), "intel_avx512_one_fma"),
    (cpuinfo("GenuineIntel", 6, 158, "Intel(R) Core(TM) i7-9700K", "avx avx2 fma"), "intel_avx2"),
    # the development VMs' Xeon reports model 0xA7 (Rocket Lake, one FMA unit) with AMX tiles: the
    # instruction sets decide, never the model number alone
    (cpuinfo("GenuineIntel", 6, 0xA7, "Intel Xeon Processor", AVX512 + " avx512_fp16 amx_tile amx_bf16"),
     "sapphirerapids"),
    (cpuinfo("GenuineIntel", 6, 0xA7, "Intel Xeon Processor", AVX512 + " amx_tile amx_bf16 amx_fp16"),
     "graniterapids"),
])
def test_the_microarchitecture_decides_flop_per_cycle(text, uarch):
    assert cpu_microarchitecture(text) == (uarch, "")


@pytest.mark.parametrize("text, said", [
    (cpuinfo("GenuineIntel", 6, 85, "Intel Xeon Processor (Cascadelake)", AVX512), "by SKU"),
    (cpuinfo("CentaurHauls", 7, 59, "VIA", "avx avx2"), "not a microarchitecture parbench knows"),
    ("processor\t: 0\nflags\t: avx2\n", "no CPU family and model"),
])
def test_a_microarchitecture_that_cannot_be_told_says_why(text, said):
    uarch, why = cpu_microarchitecture(text)
    assert uarch is None and said in why


# archspec (Spack's detection) names the microarchitecture first; /proc/cpuinfo decides where it cannot.
THIS_VM = cpuinfo("AuthenticAMD", 26, 2, "AMD EPYC", AVX512 + " avx512_bf16")


@pytest.mark.parametrize("archspec_name, text, uarch", [
    ("zen4", None, "zen4"),
    ("zen5", None, "zen5"),
    ("haswell", None, "intel_avx2"),
    ("alderlake", None, "intel_avx2"),
    ("cannonlake", None, "intel_avx512_one_fma"),
    # archspec gives a generic level: this VM hides flush_l1d, pku, rdseed, movdiri (archspec 0.2.7)
    ("x86_64_v4", THIS_VM, "zen5"),
    # archspec saw fewer features than the silicon has: family 0x1a is Zen 5, whatever it shows
    ("zen4", THIS_VM, "zen5"),
    # archspec's name spans one- and two-unit parts: the model decides
    ("icelake", cpuinfo("GenuineIntel", 6, 106, "Intel(R) Xeon(R) Platinum 8375C", AVX512), "icelake_server"),
    ("icelake", cpuinfo("GenuineIntel", 6, 140, "11th Gen Intel(R) Core(TM) i7-1185G7", AVX512),
     "intel_avx512_one_fma"),
    ("cascadelake", cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", AVX512),
     "skylake_avx512_two_fma"),
    ("sapphirerapids", cpuinfo("GenuineIntel", 6, 173, "Intel(R) Xeon(R) 6972P", AVX512 + " amx_fp16"),
     "graniterapids"),    # a VM whose archspec answer is generic or a client part, with AMX in its flags
    ("x86_64_v4", cpuinfo("GenuineIntel", 6, 0xA7, "Intel Xeon Processor", AVX512 + " amx_bf16"), "sapphirerapids"),
    ("icelake", cpuinfo("GenuineIntel", 6, 0xA7, "Intel Xeon Processor", AVX512 + " amx_bf16"), "sapphirerapids"),
])
def test_archspec_names_the_microarchitecture_and_cpuinfo_refines_it(archspec_name, text, uarch):
    assert cpu_microarchitecture(text, archspec_name=archspec_name) == (uarch, "")


@pytest.mark.parametrize("archspec_name, text, said", [
    ("zen6", None, "archspec names it zen6"),  # no row: not the Zen 5 row that family 0x1a would give
    ("zen6", THIS_VM, "does not know the FMA units"),
    ("icelake", None, "whose parts differ in FMA units"),
    ("cascadelake", cpuinfo("GenuineIntel", 6, 85, "Intel Xeon Processor (Cascadelake)", AVX512), "by SKU"),
    ("x86_64_v3", cpuinfo("CentaurHauls", 7, 59, "VIA", "avx avx2"), "generic level x86_64_v3"),
])
def test_what_archspec_cannot_tell_says_why(archspec_name, text, said):
    uarch, why = cpu_microarchitecture(text, archspec_name=archspec_name)
    assert uarch is None and said in why


def test_every_cpu_row_is_reachable_and_every_archspec_name_is_archspecs(table):
    from archspec.cpu import TARGETS

    from suites.hardware.devices import ARCHSPEC_BY_MODEL, ARCHSPEC_ROWS, ROW_ARCHSPEC_TARGETS

    rows = {entry["uarch"] for entry in table.cpu if "uarch" in entry}
    assert set(ARCHSPEC_ROWS.values()) <= rows and set(ROW_ARCHSPEC_TARGETS) == rows
    for name in (*ARCHSPEC_ROWS, *ARCHSPEC_BY_MODEL, *ROW_ARCHSPEC_TARGETS.values()):
        assert name in TARGETS and TARGETS[name].vendor != "generic", name


def test_this_host_is_named_by_archspec_or_cpuinfo(monkeypatch):
    from suites.hardware import devices

    name, why = devices.archspec_host()
    assert name, why  # archspec is installed and answers (a generic level at least)
    monkeypatch.setattr(devices, "archspec_host", lambda: ("zen6", ""))
    assert devices.cpu_microarchitecture()[0] is None  # the host's answer is archspec's when it knows
    monkeypatch.setattr(devices, "archspec_host", lambda: (None, "archspec is not installed"))
    uarch, why = devices.cpu_microarchitecture()
    assert uarch or "archspec is not installed" in why  # the /proc/cpuinfo rules, where they know


def test_avx512_rows_differ_by_fma_units(table, monkeypatch):
    """The same extensions, two peaks: Zen 4 runs AVX-512 on 256-bit units, Zen 5 on 512-bit ones."""
    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: 2.0)
    zen4 = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("c",), details={**ZEN5.details, "uarch": "zen4"})
    assert table.peak_tflops(ZEN5, Precision.FP32) == pytest.approx(64 * 2 * 2.0 / 1000)
    assert table.peak_tflops(zen4, Precision.FP32) == pytest.approx(32 * 2 * 2.0 / 1000)


def test_an_unknown_clock_or_microarchitecture_gives_no_table_peak_and_says_use_calibrate(table, monkeypatch):
    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: None)
    found = table.lookup(ZEN5, Precision.FP32)
    assert found.tflops is None and found.entry == "zen5"
    assert "highest clock" in found.reason and "parbench calibrate" in found.reason
    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: 3.0)
    unknown = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("c",), details={
        "isa": ["avx2", "avx512f"], "uarch": None, "uarch_reason": "GenuineIntel family 0x6 model 0x55: by SKU",
        "usable_cores": 2})
    found = table.lookup(unknown, Precision.FP32)
    assert found.tflops is None and "by SKU" in found.reason and "parbench calibrate" in found.reason


# --- a figure above a peak ----------------------------------------------------------------------------

@pytest.fixture
def zen5_at_2ghz(monkeypatch):
    """This test's CPU: 2 Zen 5 cores at 2 GHz, table peak 64 x 2 x 2 / 1000 = 0.256 TFLOP/s."""
    monkeypatch.delenv(PEAKS_ENV, raising=False)
    monkeypatch.setattr(metrics_module, "discover", lambda framework, device: ZEN5)
    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: 2.0)
    return 0.256


def derived(tmp_path: Path, tflops: float) -> dict:
    median = FLOPS / (tflops * 1e12)
    return metrics_module.derive(MATMUL, Measurement((median,) * 9), tmp_path, "box", PeakTable.load(),
                                 {"flops_per_step": FLOPS, "min_bytes_per_step": None,
                                  **{name: None for name in metrics_module.CASE_WORK if name != "flops_per_step"}},
                                 emulated=False)


def test_a_figure_above_the_table_peak_is_flagged_and_kept(tmp_path, zen5_at_2ghz):
    metrics = derived(tmp_path, 0.30)
    assert metrics[ABOVE_PEAK] is True
    assert metrics["pct_peak_table"] == pytest.approx(100 * 0.30 / zen5_at_2ghz)  # the true figure, > 100


def test_a_figure_below_the_peak_is_not_flagged(tmp_path, zen5_at_2ghz):
    metrics = derived(tmp_path, 0.20)
    assert metrics[ABOVE_PEAK] is False and metrics["pct_peak_table"] < 100


@pytest.mark.parametrize("tflops", [0.01, 0.2, 0.255, 0.257, 0.5, 3.0])
def test_no_percent_of_peak_is_over_100_without_the_flag(tmp_path, zen5_at_2ghz, tflops):
    metrics = derived(tmp_path, tflops)
    over = [name for name in PCT_OF_PEAK if (metrics.get(name) or 0) > 100]
    assert metrics[ABOVE_PEAK] is bool(over)


def test_a_figure_above_the_calibrated_peak_is_flagged_too(tmp_path, monkeypatch):
    monkeypatch.delenv(PEAKS_ENV, raising=False)
    monkeypatch.setattr(metrics_module, "discover", lambda framework, device: ZEN5)
    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: None)  # no table peak here
    save_calibration(tmp_path, "box", ZEN5, Precision.FP32, 0.40, "a GEMM")
    metrics = derived(tmp_path, 0.45)
    assert metrics.get("pct_peak_table") is None and metrics["pct_peak_measured"] > 100
    assert metrics[ABOVE_PEAK] is True


def test_no_peak_no_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics_module, "discover", lambda framework, device: ZEN5)
    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: None)
    assert ABOVE_PEAK not in derived(tmp_path, 0.45)


def test_the_stored_record_says_the_peak_is_wrong_and_the_roofline_uses_the_figure(tmp_path, zen5_at_2ghz):
    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=TINY, label="box")
    context.store.ensure_writable()
    median = FLOPS / 0.30e12
    measured = Outcome(Status.OK, measurement=Measurement((median,) * 9))
    Runner.storing(context, launcher=lambda job, timing: measured).run(MATMUL)
    (record,) = ResultsStore(tmp_path).load()
    assert record.metrics[ABOVE_PEAK] is True and record.metrics["pct_peak_table"] > 100
    assert "peak table below the measured figure" in record.details[ABOVE_PEAK]
    assert "the peak is wrong" in record.details[ABOVE_PEAK]
    assert record.metrics["roof_peak_tflops"] == pytest.approx(0.30)  # the figure replaces the peak
    record.metrics[ABOVE_PEAK] = 1.0  # a flag is true or false, nothing else
    with pytest.raises(ValueError, match="above_peak"):
        check(record)


# --- the data rows corrected --------------------------------------------------------------------------

def test_b200_rows_are_the_gpus_own_dense_figures(table):
    entry = table.gpu_entry("NVIDIA B200")
    assert (entry["tf32"], entry["fp32"], entry["bf16"], entry["bandwidth_gbs"]) == (1100.0, 75.0, 2250.0, 7700)


def test_the_l4_has_its_per_gpu_price_and_the_gh200_none_without_a_source():
    rows = {entry["match"]: entry for entry in shipped_table("prices.toml")["device"]}
    l4 = rows["L4"]
    assert l4["per_hour"] == 0.56 and l4["region"] == "us-west1"
    assert "billing catalog" in l4["source"] and "2026-09-27" in l4["source"] and "not included" in l4["source"]
    assert "per_hour" not in rows["GH200"] and rows["GH200"]["no_price_reason"]
