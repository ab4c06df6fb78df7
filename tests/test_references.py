"""Published reference figures: the editable table, which runs match a row, the report's section."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from suites.cases.case import Case
from suites.errors import UserError
from suites.frontends.cli import main
from suites.hardware.references import REFERENCES_ENV, UNITS, ReferenceRow, load_references
from suites.report.analyses.references import matches, why_unmatched
from suites.report.analyses.selection import latest, usable
from suites.report.sections.references import reference_tables
from suites.workloads.training import default_sizes

A100_TF32 = ReferenceRow(model="resnet50", match="A100 80GB", device="NVIDIA A100 80GB", precision="tf32",
                         n_devices=1, samples_per_s=938.0, source="test source", unit="img/s")


#: The built-in models' default sizes, as the report command gives them.
SIZES = default_sizes()
DLE_RESNET = "NVIDIA DeepLearningExamples, ResNet50 v1.5 for PyTorch"
LAMBDA = "Lambda, deeplearning-benchmark"


def runs_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the section reads: the latest usable ones."""
    return usable(latest(frame))


def figures_of(rows, source: str, model: str = "resnet50") -> dict[tuple[str, str, int], float]:
    return {(r.match, r.precision, r.n_devices): r.samples_per_s for r in rows
            if r.model == model and r.source.startswith(source)}


def test_the_shipped_table_holds_the_cited_resnet50_figures_with_source_and_conditions():
    rows = load_references()
    figures = figures_of(rows, DLE_RESNET)
    a100, v100 = "A100 SXM4 80GB", "V100 SXM2 16GB"  # the exact boards of DGX A100 and DGX-1
    assert figures[(a100, "tf32", 1)] == 938 and figures[(a100, "tf32", 8)] == 7248
    assert figures[(a100, "fp16", 1)] == 2470 and figures[(a100, "fp16", 8)] == 16621
    assert figures[(v100, "fp32", 1)] == 367 and figures[(v100, "fp32", 8)] == 2855
    assert all(r.source and r.url and r.conditions for r in rows)
    a100_row = next(r for r in rows if r.match == a100)
    assert a100_row.matches_device("NVIDIA A100-SXM4-80GB")
    assert not a100_row.matches_device("NVIDIA A100 80GB PCIe") and not a100_row.matches_device("NVIDIA A100-SXM4-40GB")


def test_the_shipped_table_holds_lambdas_h100_and_a100_resnet50_figures_on_their_exact_boards():
    rows = load_references()
    figures = figures_of(rows, LAMBDA)
    sxm5, pcie, a100 = "H100 80GB HBM3", "H100 PCIe", "A100 SXM4 80GB"
    assert figures == {(sxm5, "fp16", 1): 2616, (sxm5, "fp16", 8): 20728, (pcie, "fp16", 1): 1866,
                       (pcie, "fp16", 8): 14713, (a100, "fp16", 1): 1582, (a100, "fp16", 8): 11439}
    sxm5_row = next(r for r in rows if r.match == sxm5)
    # CUDA names the SXM5 board "NVIDIA H100 80GB HBM3"; the PCIe, NVL and GH200 boards are others
    assert sxm5_row.matches_device("NVIDIA H100 80GB HBM3")
    assert not any(sxm5_row.matches_device(name)
                   for name in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA GH200 480GB"))
    pcie_row = next(r for r in rows if r.match == pcie)
    assert pcie_row.matches_device("NVIDIA H100 PCIe") and not pcie_row.matches_device("NVIDIA H100 80GB HBM3")


def test_the_shipped_table_holds_the_transformer_figures_in_tokens_per_second_at_their_sizes():
    rows = load_references()
    (gpt2,) = [r for r in rows if r.model == "gpt2_small"]
    assert ((gpt2.samples_per_s, gpt2.unit, gpt2.precision, gpt2.n_devices, gpt2.sizes)
            == (1251751, "tokens/s", "bf16", 8, ()))
    assert "MPT-125m, not GPT-2" in gpt2.conditions  # the nearest published figure says what it is
    llama = {(r.source.split(",")[0], r.match): r for r in rows if r.model == "llama_block"}
    figures = {key: (r.samples_per_s, r.unit, r.precision, r.n_devices) for key, r in llama.items()}
    assert figures == {("NVIDIA Megatron-Bridge", "H100 80GB HBM3"): (14451, "tokens/s/GPU", "fp8", 8),
                       ("PyTorch torchtitan", "H100 96GB"): (5762, "tokens/s/GPU", "bf16", 8),
                       ("PyTorch torchtitan", "H200"): (10938, "tokens/s/GPU", "fp8", 32)}
    assert all(r.sizes == (("seq", 8192),) for r in llama.values())
    # torchtitan's H100 is a 96GB HBM2e board: no 80GB HBM3 run is taken for it
    assert not llama[("PyTorch torchtitan", "H100 96GB")].matches_device("NVIDIA H100 80GB HBM3")


def test_an_h100_run_stands_beside_the_shipped_rows_of_other_boards_in_their_units():
    run = lm_run(param_model="llama_block", device_name="NVIDIA H100 80GB HBM3", param_seq=8192.0,
                 samples_per_s=6.0, tokens_per_s=48_000.0)  # 6,000 tokens/s per GPU
    tables = reference_tables(runs_of(pd.DataFrame([run])), load_references(), SIZES)
    others = [[cell.text for cell in row] for row in tables[-1].rows]
    (beside,) = [row for row in others if row[0] == "llama_block (seq=8192)"]
    assert beside[5:9] == ["6,000", "NVIDIA H100 96GB HBM2e SXM, 500 W (Meta Grand Teton)", "5,762 tokens/s/GPU",
                           "1.04×"]


def test_every_shipped_row_reads_a_record_figure_and_names_its_source():
    for row in load_references():
        assert row.unit in UNITS and row.column in ("samples_per_s", "tokens_per_s")
        assert row.source and row.url.startswith("https://github.com/") and row.conditions
        assert row.n_devices >= 1 and row.samples_per_s > 0


def test_a_users_rows_come_first_and_a_bad_row_is_one_clear_error(tmp_path: Path, monkeypatch):
    mine = tmp_path / "mine.toml"
    mine.write_text('[[reference]]\nmodel = "resnet50"\nmatch = "H100"\ndevice = "H100"\nprecision = "bf16"\n'
                    'n_devices = 1\nsamples_per_s = 3000\nsource = "my lab"\n')
    monkeypatch.setenv(REFERENCES_ENV, str(mine))
    assert load_references()[0].source == "my lab" and len(load_references()) == len(load_references(None))
    mine.write_text('[[reference]]\nmodel = "resnet50"\nprecision = "bf16"\n')
    with pytest.raises(UserError, match=r"mine.toml, reference row 1: missing .*match.*samples_per_s"):
        load_references()
    row = ('[[reference]]\nmodel = "gpt2_small"\nmatch = "H100"\ndevice = "H100"\nprecision = "bf16"\n'
           'n_devices = 1\nsamples_per_s = 3000\nsource = "my lab"\n')
    mine.write_text(row + 'unit = "tok/s"\n')
    with pytest.raises(UserError, match=r"reference row 1: unit 'tok/s' is not one of img/s, .*tokens/s"):
        load_references()
    mine.write_text(row + 'sizes = { seq = "long" }\n')
    with pytest.raises(UserError, match=r"reference row 1: sizes must be a table of whole numbers"):
        load_references()


def run_row(**fields) -> pd.Series:
    row = {"machine": "box", "device": "gpu", "device_name": "NVIDIA A100-SXM4-80GB", "n_devices": 1,
           "framework": "torch", "strategy": "single", "precision": "tf32", "param_model": "resnet50",
           "param_batch": 256, "samples_per_s": 900.0, "status": "ok", "throughput": 900.0, "check_passed": True,
           "timestamp": "2026-01-01T00:00:00", "case_id": "c", "emulated": False}
    row.update(fields)
    return pd.Series(row)


@pytest.mark.parametrize("fields, why", [
    ({}, None),
    ({"param_image": 224.0, "param_batchnorm": "sync"}, None),  # default sizes, stated or not, and sync BN
    ({"device_name": "NVIDIA A100-SXM4-40GB"}, "no reference row for gpu NVIDIA A100-SXM4-40GB"),
    ({"precision": "bf16"}, "the rows for this device are for tf32 x1, not bf16 x1"),
    ({"n_devices": 8}, "not tf32 x8"),
    ({"device": "cpu", "device_name": "Intel Xeon", "param_image": 64.0, "param_width": 16.0},
     "not resnet50 at its published size: image=64, width=16"),
    ({"param_model": "cnn"}, "no reference row"),
])
def test_a_run_matches_a_row_on_model_at_its_size_device_precision_and_device_count(fields, why):
    row = run_row(**fields)
    assert matches(A100_TF32, row, SIZES) is (why is None)
    if why:
        assert why in why_unmatched([A100_TF32], row, SIZES)


def test_the_section_sets_matching_runs_beside_their_row_and_lists_the_rest_without_inventing_figures():
    frame = pd.DataFrame([run_row(), run_row(case_id="cpu", device="cpu", device_name="Intel Xeon", samples_per_s=5.0,
                                             throughput=5.0, param_image=64.0),
                          run_row(case_id="bad", check_passed=False, samples_per_s=5000.0, throughput=5000.0)])
    v100 = ReferenceRow(model="resnet50", match="V100 16GB", device="V100", precision="fp32", n_devices=1,
                        samples_per_s=367.0, source="s")
    matched, unmatched = reference_tables(runs_of(frame), [A100_TF32, v100], SIZES)
    texts = [[cell.text for cell in row] for row in matched.rows]
    assert texts[0][-3:] == ["box: torch single, gpu×1, batch 256/device", "900", "0.96×"]
    assert texts[1][-3:] == ["no matching run", "–", "–"]  # nothing invented for the V100 row
    assert all("5,000" not in cell for row in texts for cell in row)  # a failed check is no figure
    assert ([[cell.text for cell in row][-1] for row in unmatched.rows]
            == ["not resnet50 at its published size: image=64"])


def test_a_run_on_another_accelerator_stands_beside_the_a100_row_with_the_ratio():
    h100 = run_row(device_name="NVIDIA H100 80GB HBM3", samples_per_s=2514.0, throughput=2514.0)
    small = run_row(case_id="small", device_name="NVIDIA H100 80GB HBM3", param_image=64.0)
    _, unmatched, others = reference_tables(runs_of(pd.DataFrame([h100, small])), [A100_TF32], SIZES)
    (texts,) = [[cell.text for cell in row] for row in others.rows]  # the smaller model has no row
    assert texts[2:9] == ["NVIDIA H100 80GB HBM3", "tf32", "1", "2,514", "NVIDIA A100 80GB", "938 img/s", "2.68×"]
    assert len(unmatched.rows) == 2  # neither matches the A100 row itself


def test_the_report_shows_the_reference_section_escaped(tmp_path: Path):
    pytest.importorskip("torch")
    from tests.report_support import XSS_LABEL, run_machine

    case = Case.make("train_step", "torch", "cpu", params={"model": "resnet50", "batch": 2, "image": 32, "width": 4,
                                                          "resnet_depth": 14, "classes": 10})
    run_machine(tmp_path / "results", XSS_LABEL, 1, cases=(case,), with_failure=False)
    mine = tmp_path / "mine.toml"
    mine.write_text('[[reference]]\nmodel = "resnet50"\nmatch = "A100"\ndevice = "A100"\nprecision = "fp32"\n'
                    'n_devices = 1\nsamples_per_s = 400\nsource = "<b>lab</b>"\n')
    assert main(["report", str(tmp_path / "results"), "-o", str(tmp_path / "out"), "--references", str(mine)]) == 0
    html = (tmp_path / "out" / "index.html").read_text()
    assert "Published reference figures" in html and "&lt;b&gt;lab&lt;/b&gt;" in html and "<b>lab</b>" not in html
    assert "not resnet50 at its published size: image=32, width=4, resnet_depth=14, classes=10" in html
    assert XSS_LABEL not in html


GPT2_A100 = ReferenceRow(model="gpt2_small", match="A100 80GB", device="A100 80GB", precision="bf16", n_devices=8,
                         samples_per_s=1_000_000.0, source="s", unit="tokens/s")
LLAMA_H100 = ReferenceRow(model="llama_block", match="H100 80GB HBM3", device="H100 SXM5", precision="bf16",
                          n_devices=8, samples_per_s=10_000.0, source="s", unit="tokens/s/GPU", sizes=(("seq", 8192),))


def lm_run(**fields) -> pd.Series:
    """A language-model run: 8 GPUs, samples/s in sequences, tokens/s of the global batch."""
    return run_row(**{"param_model": "gpt2_small", "precision": "bf16", "n_devices": 8, "param_batch": 8,
                      "samples_per_s": 1000.0, "tokens_per_s": 1_024_000.0, **fields})


def test_a_tokens_per_second_row_stands_beside_the_runs_tokens_per_second_not_its_samples():
    run = lm_run(device_name="NVIDIA H100 80GB HBM3", tokens_per_s=2_000_000.0)
    assert GPT2_A100.run_figure(run) == 2_000_000.0 and not matches(GPT2_A100, run, SIZES)  # another board
    assert matches(GPT2_A100, lm_run(device_name="NVIDIA A100-SXM4-80GB"), SIZES)
    _, _, others = reference_tables(runs_of(pd.DataFrame([run])), [GPT2_A100], SIZES)
    (texts,) = [[cell.text for cell in row] for row in others.rows]
    assert texts[5:9] == ["2,000,000", "A100 80GB", "1,000,000 tokens/s", "2.00×"]
    # a record without a token count has no figure in tokens/s: it matches no tokens/s row
    no_tokens = lm_run(device_name="NVIDIA A100-SXM4-80GB", tokens_per_s=float("nan"))
    assert not matches(GPT2_A100, no_tokens, SIZES)
    assert "in tokens/s, which this run does not report" in why_unmatched([GPT2_A100], no_tokens, SIZES)


def test_a_per_gpu_row_divides_the_runs_figure_by_its_devices_and_matches_only_at_its_sizes():
    at_8192 = lm_run(param_model="llama_block", device_name="NVIDIA H100 80GB HBM3", param_seq=8192.0,
                     tokens_per_s=96_000.0)
    assert matches(LLAMA_H100, at_8192, SIZES) and LLAMA_H100.run_figure(at_8192) == 12_000.0
    (matched,) = reference_tables(runs_of(pd.DataFrame([at_8192])), [LLAMA_H100], SIZES)
    texts = [cell.text for cell in matched.rows[0]]
    assert texts[0] == "llama_block (seq=8192)" and texts[-2:] == ["12,000", "1.20×"]
    for sizes, why in (({}, "not llama_block at its published size: its defaults (the rows are at seq=8192)"),
                       ({"param_seq": 8192.0, "param_layers": 4.0},
                        "not llama_block at its published size: seq=8192, layers=4 (the rows are at seq=8192)")):
        run = lm_run(param_model="llama_block", device_name="NVIDIA H100 80GB HBM3", **sizes)
        assert not matches(LLAMA_H100, run, SIZES) and why_unmatched([LLAMA_H100], run, SIZES) == why


def test_a_row_naming_a_size_the_model_does_not_have_matches_no_run():
    misspelt = ReferenceRow(model="llama_block", match="H100 80GB HBM3", device="H100", precision="bf16", n_devices=8,
                            samples_per_s=1.0, source="s", unit="tokens/s/GPU", sizes=(("seqlen", 8192),))
    run = lm_run(param_model="llama_block", device_name="NVIDIA H100 80GB HBM3")
    assert matches(dataclasses.replace(misspelt, sizes=()), run, SIZES) and not matches(misspelt, run, SIZES)
