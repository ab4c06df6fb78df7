"""A GPU's name finds its own row of the peaks table: whole model words, the most specific row,
and no row at all for a MIG slice or a model the table does not list (with the reason said).
Device names are the ones torch / TF report; no GPU is needed."""
from __future__ import annotations

import pytest

from suites.cases.vocabulary import DeviceKind, Framework, Precision
from suites.hardware.devices import DeviceInfo
from suites.hardware.peaks import PEAKS_ENV, PeakTable, is_mig_slice, name_tokens


def gpu(name: str) -> DeviceInfo:
    return DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, (name,))


@pytest.fixture
def table(monkeypatch) -> PeakTable:
    monkeypatch.delenv(PEAKS_ENV, raising=False)
    return PeakTable.load()


def entry_for(table: PeakTable, name: str) -> str | None:
    entry = table.gpu_entry(name)
    return entry["match"] if entry else None


def test_names_split_into_lower_case_words():
    assert name_tokens("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == ("nvidia", "a100", "sxm4", "40gb", "mig", "1g", "5gb")
    assert name_tokens("H100_PCIe") == ("h100", "pcie")


@pytest.mark.parametrize("name, match", [
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA L40S", "L40S"),
])
def test_l4_l40_and_l40s_are_three_models(table, name, match):
    assert entry_for(table, name) == match


def test_an_l40s_is_not_held_to_the_l4s_much_lower_peak(table):
    l4, l40, l40s = (table.peak_tflops(gpu(n), Precision.BF16) for n in ("NVIDIA L4", "NVIDIA L40", "NVIDIA L40S"))
    assert l4 == 121.0 and l40 == 181.05 and l40s == 362.05


@pytest.mark.parametrize("name, match", [
    ("NVIDIA H100 80GB HBM3", "H100"),  # SXM5, as torch names it
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", "GH200"),
])
def test_hopper_variants_find_their_own_entry(table, name, match):
    assert entry_for(table, name) == match


def test_h100_variants_have_different_peaks(table):
    peaks = {n: table.peak_tflops(gpu(n), Precision.BF16)
             for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL")}
    assert peaks == {"NVIDIA H100 80GB HBM3": 989.4, "NVIDIA H100 PCIe": 756.0, "NVIDIA H100 NVL": 835.5}


def test_the_more_specific_entry_wins_wherever_it_is_in_the_file():
    rows = ({"match": "H100", "fp32": 1.0}, {"match": "H100 NVL", "fp32": 2.0}, {"match": "L4", "fp32": 3.0})
    table = PeakTable(rows, (), 1)
    assert table.peak_tflops(gpu("NVIDIA H100 NVL"), Precision.FP32) == 2.0
    assert table.peak_tflops(gpu("NVIDIA H100 80GB HBM3"), Precision.FP32) == 1.0


def test_a100_does_not_match_an_rtx_a1000(table):
    assert entry_for(table, "NVIDIA A100-SXM4-40GB") == "A100"
    assert entry_for(table, "NVIDIA A100-SXM4-80GB") == "A100 SXM4 80GB"  # its own bandwidth
    assert entry_for(table, "NVIDIA A10") == "A10"
    found = table.lookup(gpu("NVIDIA RTX A1000"), Precision.FP32)
    assert found.tflops is None and found.entry == ""
    assert "no peaks-table entry matches" in found.reason and "NVIDIA RTX A1000" in found.reason


@pytest.mark.parametrize("name", [
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
    "NVIDIA A100-SXM4-80GB-MIG-7g.80gb",
])
def test_a_mig_slice_gets_no_peak_and_says_why(table, name):
    assert is_mig_slice(name)
    found = table.lookup(gpu(name), Precision.BF16)
    assert found.tflops is None
    assert "MIG slice" in found.reason and name in found.reason
    assert table.peak_tflops(gpu(name), Precision.BF16) is None


def test_mig_is_a_word_not_a_substring():
    assert not is_mig_slice("NVIDIA A100-SXM4-80GB")
    assert not is_mig_slice("Migrated GPU")


def test_a_users_entry_naming_the_mig_slice_applies_to_it(tmp_path, monkeypatch):
    own = tmp_path / "peaks.toml"
    own.write_text('[[gpu]]\nmatch = "A100 MIG 1g.5gb"\nbf16 = 44.0\n')
    monkeypatch.setenv(PEAKS_ENV, str(own))
    table = PeakTable.load()
    assert table.peak_tflops(gpu("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), Precision.BF16) == 44.0
    assert table.peak_tflops(gpu("NVIDIA A100-SXM4-40GB MIG 3g.20gb"), Precision.BF16) is None
    assert table.peak_tflops(gpu("NVIDIA A100-SXM4-40GB"), Precision.BF16) == 312.0  # whole GPU: shipped row


def test_a_users_entry_wins_over_a_more_specific_shipped_one(tmp_path, monkeypatch):
    own = tmp_path / "peaks.toml"
    own.write_text('[[gpu]]\nmatch = "H100"\nfp32 = 1.5\n')
    monkeypatch.setenv(PEAKS_ENV, str(own))
    assert PeakTable.load().peak_tflops(gpu("NVIDIA H100 NVL"), Precision.FP32) == 1.5


@pytest.mark.parametrize("name, match", [
    ("nvidia l40s", "L40S"),
    ("NVIDIA H100 PCIE", "H100 PCIe"),
    ("nvidia h100 nvl", "H100 NVL"),
    ("TESLA t4", "T4"),
])
def test_matching_ignores_case(table, name, match):
    assert entry_for(table, name) == match


@pytest.mark.parametrize("name, match, fp32", [
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", 19.5),  # an entry of its own for its bandwidth
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 19.5),
    ("Tesla V100-SXM2-16GB", "V100", 15.7),
    ("Tesla V100-PCIE-32GB", "V100 PCIe", 14.0),
    ("Tesla V100S-PCIE-32GB", "V100S", 16.4),
    ("Tesla T4", "T4", 8.1),
    ("NVIDIA A10", "A10", 31.2),
])
def test_names_the_table_matched_before_still_match(table, name, match, fp32):
    found = table.lookup(gpu(name), Precision.FP32)
    assert (found.entry, found.tflops, found.reason) == (match, fp32, "")


def test_every_shipped_entry_is_reachable_by_its_own_name(table):
    for entry in table.gpu:
        assert entry_for(table, f"NVIDIA {entry['match']}") == entry["match"]


def test_an_entry_without_the_precision_says_so(table):
    found = table.lookup(gpu("Tesla V100-SXM2-16GB"), Precision.BF16)
    assert found.tflops is None and found.entry == "V100" and "no bf16 peak" in found.reason


def test_an_empty_match_matches_nothing():
    table = PeakTable(({"match": " - ", "fp32": 1.0},), (), 1)
    assert table.lookup(gpu("NVIDIA L4"), Precision.FP32).tflops is None


def test_a_gpu_without_a_name_and_an_unknown_tpu_say_why(table):
    nameless = table.lookup(DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1), Precision.FP32)
    assert nameless.tflops is None and "no name" in nameless.reason
    unnamed = table.lookup(DeviceInfo(Framework.TF, DeviceKind.TPU, 1, ("TPU:0",)), Precision.BF16)
    assert unnamed.tflops is None and "no peaks-table entry matches the tpu name 'TPU:0'" in unnamed.reason


def tpu(accelerator_type: str) -> DeviceInfo:
    return DeviceInfo(Framework.TF, DeviceKind.TPU, 4, (f"TPU {accelerator_type}",) * 4)


@pytest.mark.parametrize("accelerator_type, bf16, gbs", [
    ("v4-8", 275.0, 1200.0), ("v5litepod-8", 197.0, 819.0), ("v5e", 197.0, 819.0),
    ("v5p-8", 459.0, 2765.0), ("v6e-8", 918.0, 1640.0)])
def test_each_tpu_generation_gets_its_chips_bf16_peak_and_bandwidth(table, accelerator_type, bf16, gbs):
    found = table.lookup(tpu(accelerator_type), Precision.BF16)
    assert (found.tflops, found.reason) == (bf16, "")
    assert table.bandwidth_gbs(tpu(accelerator_type)) == gbs
    assert table.lookup(tpu(accelerator_type), Precision.FP32).tflops is None  # not tabled: no guess


def test_the_t4_has_its_bandwidth_and_the_cpu_entries_none(table):
    """TOML puts a key after `[[cpu]]` into that entry: the T4's bandwidth once landed there."""
    assert table.bandwidth_gbs(gpu("Tesla T4")) == 320.0
    assert all("bandwidth_gbs" not in entry for entry in table.cpu)


@pytest.mark.parametrize("name, match, bf16", [
    ("NVIDIA B200", "B200", 2250.0), ("NVIDIA GB200", "GB200", 2500.0),
    ("AMD Instinct MI300X", "MI300X", 1307.4), ("AMD Instinct MI325X", "MI325X", 1307.4),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 165.2), ("Intel Gaudi 3", "Gaudi 3", 1835.0)])
def test_widely_rented_accelerators_have_dense_peaks(table, name, match, bf16):
    found = table.lookup(gpu(name), Precision.BF16)
    assert (found.entry, found.tflops) == (match, bf16)
    assert table.bandwidth_gbs(gpu(name))


def test_an_a10g_is_not_given_the_a10s_peak(table):
    assert table.gpu_entry("NVIDIA A10G") is None


def test_parbench_devices_shows_each_devices_table_peak_or_why_it_has_none(monkeypatch, capsys):
    import json

    from suites.frontends.cli import main

    mig = DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, ("NVIDIA A100-SXM4-40GB MIG 1g.5gb",))
    whole = DeviceInfo(Framework.TORCH, DeviceKind.GPU, 1, ("NVIDIA A100-SXM4-40GB",))
    monkeypatch.setattr("suites.frontends.commands.devices.discover_all", lambda: [mig, whole])
    assert main(["devices", "--json"]) == 0
    shown = [device["peak_table"] for device in json.loads(capsys.readouterr().out)]
    assert shown[0]["fp32_tflops"] is None and "MIG" in shown[0]["reason"]
    assert shown[1]["fp32_tflops"] == pytest.approx(19.5) and shown[1]["entry"] == "A100"


@pytest.mark.parametrize("name, gbs", [("NVIDIA H100 80GB HBM3", 3350.0), ("NVIDIA H100 PCIe", 2000.0),
                                       ("NVIDIA A100-SXM4-40GB", 1555.0), ("NVIDIA A100-SXM4-80GB", 2039.0),
                                       ("NVIDIA A100 80GB PCIe", 1935.0), ("NVIDIA L4", 300.0)])
def test_each_gpu_variant_has_its_own_memory_bandwidth(table, name, gbs):
    assert table.bandwidth_gbs(gpu(name)) == gbs


def test_a_cpu_has_no_table_bandwidth_it_is_measured(table):
    cpu = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("some cpu",), details={"isa": ["avx2"]})
    assert table.bandwidth_gbs(cpu) is None


@pytest.mark.parametrize("uarch, isa, bf16_per_cycle", [
    ("sapphirerapids", ["avx2", "avx512f", "avx512_bf16", "amx_bf16"], 1024),
    ("zen5", ["avx2", "avx512f", "avx512_bf16"], 128),  # two full-width units
    ("zen4", ["avx2", "avx512f", "avx512_bf16"], 64),  # the same extensions, double-pumped: half
    ("intel_avx2", ["avx2"], 32)])
def test_a_cpu_with_amx_has_the_tile_units_bf16_peak(table, monkeypatch, uarch, isa, bf16_per_cycle):
    """A 4th-gen Xeon's bf16 GEMMs run on AMX: the AVX-512 peak would put them above 100% of peak.
    The microarchitecture, not the extensions, sets FLOP per cycle."""
    import suites.hardware.peaks as peaks

    monkeypatch.setattr(peaks, "cpu_clock_ghz", lambda: 2.0)
    cpu = DeviceInfo(Framework.TORCH, DeviceKind.CPU, 1, ("some cpu",),
                     details={"isa": isa, "uarch": uarch, "usable_cores": 2})
    assert table.peak_tflops(cpu, Precision.BF16) == pytest.approx(bf16_per_cycle * 2 * 2.0 / 1000)
