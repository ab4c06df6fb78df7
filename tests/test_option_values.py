"""Options whose values are bounded and typed where they enter (issue 43): a machine label of blanks,
a --baseline with no value or matching no record, a device count past any cluster, a size no model
takes, a base at batch 0. Each is refused in one line naming the option; valid values still pass."""
from __future__ import annotations

import pandas as pd
import pytest

from suites import knobs
from suites.errors import UserError
from suites.frontends.cli import main
from suites.predict.base import BATCH, DEVICES, PER_NODE, parse_base, split_count
from suites.predict.catalogue import Catalogue
from suites.predict.projection import parse_target
from suites.report.analyses.comparison import SHOWN_VALUES, baseline_problem, parse_baseline
from suites.workloads.training import size_problems

BASE = "H100 SXM:1=2789@256"


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return Catalogue.load()


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith("parbench: error: "), err
    return err


# --- machine labels ---------------------------------------------------------------------------------
@pytest.mark.parametrize("label", [" ", "   ", "\u3000"])
def test_a_label_of_blanks_is_refused_naming_the_option(label):
    with pytest.raises(ValueError, match="other than blanks"):
        knobs.machine_label(label)
    with pytest.raises(UserError, match="^--label "):
        knobs.check_label(label)


@pytest.mark.parametrize("label", ["box", "a b", " box", ".."])
def test_labels_with_a_visible_character_are_taken(label):
    assert knobs.machine_label(label) == label


# --- device counts ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("8", (8, 1)), ("8x2", (16, 2)), ("8X4", (32, 4)), (" 8 x 4 ", (32, 4)), ("16", (16, 2)),
    (f"{PER_NODE.high}x1", (int(PER_NODE.high), 1)), (f"{DEVICES.high}", (int(DEVICES.high), 125000)),
    (f"8x{int(DEVICES.high) // 8}", (int(DEVICES.high), int(DEVICES.high) // 8)),
])
def test_device_counts_up_to_the_bounds_are_taken(text, expected):
    assert split_count(text, "--to") == expected


@pytest.mark.parametrize(("text", "said"), [
    ("9" * 20, "devices is too many"), (f"{int(DEVICES.high) + 1}", "devices is too many"),
    (f"{int(PER_NODE.high) + 1}x1", "devices per node is too many"),
    (f"8x{int(DEVICES.high) // 8 + 1}", "devices is too many"), ("8x" + "9" * 20, "devices is too many"),
    ("0", "is no device count"), ("8x0", "is no device count"),
])
def test_device_counts_past_the_bounds_are_refused(text, said):
    with pytest.raises(UserError, match=f"^--to: .*{said}.*GxK"):
        split_count(text, "--to")


@pytest.mark.parametrize(("text", "devices", "nodes"), [("H100:8", 8, 1), ("H100 SXM:8x4", 32, 4), ("H200:8x2", 16, 2)])
def test_targets_in_range_are_taken(catalogue, text, devices, nodes):
    target = parse_target(text, catalogue)
    assert (target.devices, target.nodes) == (devices, nodes)


def test_a_huge_target_is_refused_by_predict_and_by_report_naming_each_option(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    huge = "h100:" + "9" * 20
    assert main(["predict", "--model", "resnet50", "--base", BASE, "--to", huge]) == 2
    assert one_line(capsys).startswith(f"parbench: error: --to '{huge}': ")
    assert main(["report", "results", "-o", "out", "--predict-to", huge, "--predict-base", BASE]) == 2
    assert one_line(capsys).startswith(f"parbench: error: --predict-to '{huge}': ")


# --- a published base's batch -----------------------------------------------------------------------
@pytest.mark.parametrize(("text", "batch"), [(BASE, 256), ("H100 SXM:1=2789", None), ("H100:8x2=9000@1", 1),
                                             (f"H100:1=10@{BATCH.high}", BATCH.high)])
def test_bases_in_range_are_taken(catalogue, text, batch):
    assert parse_base(text, catalogue).per_device_batch == batch


@pytest.mark.parametrize("batch", ["0", "00", str(int(BATCH.high) + 1), "9" * 20])
def test_a_base_batch_out_of_range_is_refused_naming_the_option(catalogue, batch):
    with pytest.raises(UserError, match=f"^--base 'H100:1=1000@{batch}': the per-device batch '{batch}'"):
        parse_base(f"H100:1=1000@{batch}", catalogue)


def test_a_base_at_batch_zero_is_refused_by_predict_and_by_report(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--model", "resnet50", "--to", "H100:8", "--base", "H100:1=1000@0"]) == 2
    assert one_line(capsys).startswith("parbench: error: --base 'H100:1=1000@0': ")
    assert main(["report", "results", "-o", "out", "--predict-to", "H100:8", "--predict-base", "H100:1=1000@0"]) == 2
    assert one_line(capsys).startswith("parbench: error: --predict-base 'H100:1=1000@0': ")


# --- model sizes ------------------------------------------------------------------------------------
def test_a_size_no_model_takes_is_a_problem_not_a_key_error():
    (problem,) = size_problems("resnet50", {"colour": 3})
    assert "colour" in problem and "image" in problem and "'resnet50'" in problem
    (problem,) = size_problems("resnet50", {"colour": 3, "seq": 2})
    assert "colour" in problem and "seq (transformer" in problem


def test_predict_refuses_a_size_the_model_does_not_take_naming_sizes(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--model", "resnet50", "--to", "H100:8", "--base", BASE, "--sizes", "colour=3"]) == 2
    line = one_line(capsys)
    assert "colour" in line and "--sizes" in line and "image" in line


# --- --baseline -------------------------------------------------------------------------------------
@pytest.mark.parametrize("item", ["precision=", "precision=  "])
def test_a_baseline_without_a_value_is_refused_naming_the_option(item):
    with pytest.raises(ValueError, match=f"^--baseline '{item}': no value"):
        parse_baseline([item])


def test_baselines_with_values_are_taken():
    assert parse_baseline(["precision=fp32", "machine=a=b"]) == {"precision": "fp32", "machine": "a=b"}


def records() -> pd.DataFrame:
    return pd.DataFrame({"precision": ["fp32", "bf16", "fp32"], "machine": ["a", "a", "b"],
                         "n_devices": [1, 2, 1]})


def test_a_baseline_that_matches_a_record_passes():
    assert baseline_problem(records(), {"precision": "fp32"}) is None
    assert baseline_problem(records(), {"n_devices": "2", "machine": "a"}) is None


def test_a_baseline_that_matches_no_record_lists_the_values_there_are():
    problem = baseline_problem(records(), {"precision": "fp8"})
    assert problem.startswith("--baseline precision=fp8 matches no record") and "one of bf16, fp32" in problem


def test_a_baseline_whose_values_no_record_has_together_says_so():
    problem = baseline_problem(records(), {"precision": "bf16", "machine": "b"})
    assert problem.startswith("--baseline precision=bf16, machine=b matches no record") and "together" in problem


def test_a_baseline_lists_at_most_a_few_values():
    frame = pd.DataFrame({"machine": [f"m{i:03}" for i in range(SHOWN_VALUES + 5)]})
    problem = baseline_problem(frame, {"machine": "nosuch"})
    assert "m000" in problem and f"m{SHOWN_VALUES:03}" not in problem and "and 5 more" in problem
