"""Published reference figures: the editable table, which runs match a row, the report's section."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from suites.cases.case import Case
from suites.errors import UserError
from suites.frontends.cli import main
from suites.kept.references import REFERENCES_ENV, ReferenceRow, load_references
from suites.report.references import matches, reference_tables, why_unmatched

A100_TF32 = ReferenceRow(model="resnet50", match="A100 80GB", device="NVIDIA A100 80GB", precision="tf32",
                         n_devices=1, samples_per_s=938.0, source="test source", unit="img/s")


def test_the_shipped_table_holds_the_cited_resnet50_figures_with_source_and_conditions():
    rows = load_references()
    figures = {(r.match, r.precision, r.n_devices): r.samples_per_s for r in rows if r.model == "resnet50"}
    a100, v100 = "A100 SXM4 80GB", "V100 SXM2 16GB"  # the exact boards of DGX A100 and DGX-1
    assert figures[(a100, "tf32", 1)] == 938 and figures[(a100, "tf32", 8)] == 7248
    assert figures[(a100, "fp16", 1)] == 2470 and figures[(a100, "fp16", 8)] == 16621
    assert figures[(v100, "fp32", 1)] == 367 and figures[(v100, "fp32", 8)] == 2855
    assert all(r.source and r.url and r.conditions for r in rows)
    a100_row = next(r for r in rows if r.match == a100)
    assert a100_row.matches_device("NVIDIA A100-SXM4-80GB")
    assert not a100_row.matches_device("NVIDIA A100 80GB PCIe") and not a100_row.matches_device("NVIDIA A100-SXM4-40GB")


def test_a_users_rows_come_first_and_a_bad_row_is_one_clear_error(tmp_path: Path, monkeypatch):
    mine = tmp_path / "mine.toml"
    mine.write_text('[[reference]]\nmodel = "resnet50"\nmatch = "H100"\ndevice = "H100"\nprecision = "bf16"\n'
                    'n_devices = 1\nsamples_per_s = 3000\nsource = "my lab"\n')
    monkeypatch.setenv(REFERENCES_ENV, str(mine))
    assert load_references()[0].source == "my lab" and len(load_references()) == len(load_references(None))
    mine.write_text('[[reference]]\nmodel = "resnet50"\nprecision = "bf16"\n')
    with pytest.raises(UserError, match=r"mine.toml, reference row 1: missing .*match.*samples_per_s"):
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
    assert matches(A100_TF32, row) is (why is None)
    if why:
        assert why in why_unmatched([A100_TF32], row)


def test_the_section_sets_matching_runs_beside_their_row_and_lists_the_rest_without_inventing_figures():
    frame = pd.DataFrame([run_row(), run_row(case_id="cpu", device="cpu", device_name="Intel Xeon", samples_per_s=5.0,
                                             throughput=5.0, param_image=64.0),
                          run_row(case_id="bad", check_passed=False, samples_per_s=5000.0, throughput=5000.0)])
    v100 = ReferenceRow(model="resnet50", match="V100 16GB", device="V100", precision="fp32", n_devices=1,
                        samples_per_s=367.0, source="s")
    matched, unmatched = reference_tables(frame, [A100_TF32, v100])
    texts = [[cell.text for cell in row] for row in matched.rows]
    assert texts[0][-3:] == ["box: torch single, gpu×1, batch 256/device", "900", "0.96×"]
    assert texts[1][-3:] == ["no matching run", "–", "–"]  # nothing invented for the V100 row
    assert all("5,000" not in cell for row in texts for cell in row)  # a failed check is no figure
    assert [[cell.text for cell in row][-1] for row in unmatched.rows] == ["not resnet50 at its published size: image=64"]


def test_a_run_on_another_accelerator_stands_beside_the_a100_row_with_the_ratio():
    h100 = run_row(device_name="NVIDIA H100 80GB HBM3", samples_per_s=2514.0, throughput=2514.0)
    small = run_row(case_id="small", device_name="NVIDIA H100 80GB HBM3", param_image=64.0)
    _, unmatched, others = reference_tables(pd.DataFrame([h100, small]), [A100_TF32])
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
