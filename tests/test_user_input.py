"""What users see on bad or piped input: console width, generated cases, warnings said once."""
from __future__ import annotations

from pathlib import Path

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Framework, Status, Strategy
from suites.frontends.cli import main
from suites.frontends.benchmark_model import cases_for
from suites.records.record import Record
from suites.records.store import ResultsStore
from suites.report.render.terminal import terminal
from suites.workloads.user_model import UserModel

#: A case id longer than 80 columns, which a squeezed table folds over several lines.
LONG = Case.make("conv2d", "torch", "cpu", params={"batch": 16, "cin": 64, "cout": 64, "h": 32, "w": 32,
                                                  "kernel": 3, "layout": "nhwc"})


def unavailable_record(machine: str) -> Record:
    return Record(case=LONG, status=Status.UNAVAILABLE, run_id=f"run-{machine}", timestamp="2024-01-01T00:00:00+00:00",
                  suite="test", environment={"machine": machine}, reason="test fixture")


def records_of(root: Path, machine: str) -> str:
    store = ResultsStore(root)
    store.ensure_writable()
    return str(store.append(unavailable_record(machine)))


def test_piped_consoles_are_200_columns_on_stdout_and_stderr(capsys):
    assert terminal().width == 200 and not terminal().stderr
    assert terminal(stderr=True).width == 200 and terminal(stderr=True).stderr


def test_compare_piped_keeps_a_long_case_id_on_one_line(capsys, tmp_path):
    assert len(LONG.id) > 80
    a, b = records_of(tmp_path / "a", "box-a"), records_of(tmp_path / "b", "box-b")
    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert any(LONG.id in line for line in out.splitlines()), out
    assert "both unavailable" in out


def test_report_on_a_missing_path_is_one_line_naming_it(capsys, tmp_path):
    missing = tmp_path / "nonexistent"
    assert main(["report", str(missing), "-o", str(tmp_path / "reports")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("parbench: error: no results found"), lines
    assert f"({missing}: no such file or folder; skipped)" in lines[0]


def test_report_warns_once_about_a_missing_path_beside_real_results(capsys, tmp_path):
    missing = tmp_path / "nonexistent"
    records_of(tmp_path / "results", "box-a")
    assert main(["report", str(tmp_path / "results"), str(missing), "-o", str(tmp_path / "reports")]) == 0
    err = capsys.readouterr().err
    assert err.count(f"{missing}: no such file or folder") == 1, err
    assert (tmp_path / "reports" / "index.html").is_file()


def model_of_both_frameworks() -> UserModel:
    """Builders are never called: only the cases are enumerated."""
    return UserModel(model_name="cases_only", sample_shape=(3,),
                     builders={Framework.TORCH: object, Framework.TF: object})


def test_benchmark_model_generates_no_strategy_on_a_device_it_cannot_use():
    cases = cases_for(model_of_both_frameworks(), batch=32, devices=["cpu", "gpu", "tpu"])
    triples = {(c.framework, c.device, c.strategy) for c in cases}
    assert not {(f, d, s) for f, d, s in triples if s is Strategy.TPU and d is not DeviceKind.TPU}
    assert not {(f, d, s) for f, d, s in triples if d is DeviceKind.TPU and s is Strategy.MIRRORED}
    assert (Framework.TF, DeviceKind.TPU, Strategy.TPU) in triples
    # Pairs that run where the hardware is stay, to be reported unavailable with the reason.
    assert {(Framework.TORCH, DeviceKind.GPU, Strategy.DDP), (Framework.TF, DeviceKind.GPU, Strategy.MIRRORED),
            (Framework.TORCH, DeviceKind.CPU, Strategy.DATAPARALLEL)} <= triples
    default = cases_for(model_of_both_frameworks(), batch=32)
    assert all(c.strategy is not Strategy.TPU for c in default)



def test_benchmark_model_generates_only_strategies_that_train_and_says_which_it_skipped():
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cases = cases_for(model_of_both_frameworks(), batch=32, devices=["cpu"], precisions=["fp32"],
                          strategies=["single", "towers", "mirrored", "ddp"])
    triples = {(c.framework, c.strategy) for c in cases}
    assert triples == {(Framework.TORCH, Strategy.SINGLE), (Framework.TORCH, Strategy.DDP),
                       (Framework.TF, Strategy.SINGLE), (Framework.TF, Strategy.TOWERS),
                       (Framework.TF, Strategy.MIRRORED)}
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "torch/cpu/towers" in messages[0] and "torch/cpu/mirrored" in messages[0]
    assert "tf/cpu/ddp" in messages[0] and "tf/cpu/towers" not in messages[0]
