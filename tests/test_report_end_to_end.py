"""Loading, `parbench report` and `parbench compare` on real results of all three front ends.

The results are made by parbench's own runner (two machine labels, unavailable cases, one
injected crash), asv's own Results writer and a real pytest-benchmark session: see
tests/report_support.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suites.cases.case import Case
from suites.frontends.cli import main
from suites.frontends.commands.compare import INCONCLUSIVE
from suites.records.store import ResultsWarning
from suites.report.load.columns import COLUMNS
from suites.frontends.results import load_results
from tests.report_support import (FAILED_CASE, MACHINES, OK_CASES, UNAVAILABLE_CASES, add_asv_benchmark,
                                  asv_results, save_asv, write_asv, write_parbench, write_pytest_benchmark)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    pytest.importorskip("torch", reason="the results are made by real torch runs")
    root = tmp_path_factory.mktemp("report") / "results"
    write_parbench(root)
    write_asv(root)
    write_pytest_benchmark(root, root.parent / "pytest-work")
    return root


@pytest.fixture(scope="module")
def frame(results) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        return load_results(results)


def test_one_tidy_table_from_all_three_sources_and_every_machine(frame):
    assert set(frame["source"]) == {"parbench", "asv", "pytest-benchmark"}
    assert set(MACHINES) | {"asv-box", "pytest-box"} == set(frame["machine"])
    assert list(frame.columns[:2]) == ["source", "machine"]
    assert set(COLUMNS) <= set(frame.columns)
    assert {"param_m", "param_batch", "param_layout"} <= set(frame.columns)
    ok = frame[frame["status"].eq("ok")]
    assert ok["median_s"].gt(0).all() and ok["throughput"].gt(0).all() and ok["n"].ge(1).all()


def test_parbench_rows_keep_their_provenance_and_samples(frame):
    rows = frame[frame["source"].eq("parbench") & frame["status"].eq("ok")]
    # TF's threads appear too when an earlier test in the session imported TensorFlow.
    torch_threads = rows["threads"].str.extract(r"torch=(\d+)")[0]
    assert set(torch_threads) == {"1", "2"}
    assert (rows["samples_s"].map(len) == rows["n"]).all()
    assert rows["check_passed"].all()
    per_machine = rows.groupby("machine")["case_id"].nunique()
    assert (per_machine == len(OK_CASES)).all()


def test_unavailable_and_failed_cases_are_rows_with_reasons(frame):
    parbench = frame[frame["source"].eq("parbench")]
    unavailable = parbench[parbench["status"].eq("unavailable")]
    assert set(unavailable["case_id"]) == {case.id for case in UNAVAILABLE_CASES}
    assert unavailable["reason"].str.len().gt(0).all()
    failed = parbench[parbench["status"].eq("failed")]
    assert set(failed["case_id"]) == {FAILED_CASE.id}
    assert failed["reason"].str.contains("injected fault").all()


def test_asv_results_expand_params_mark_skips_and_honour_versions(frame):
    asv = frame[frame["source"].eq("asv")].set_index("case_id")
    # The case ids are rebuilt from the named axes; the skipped gpu x bf16 combination is no case.
    assert set(asv.index) == {OK_CASES[0].id, OK_CASES[1].id, UNAVAILABLE_CASES[0].id}
    assert asv.loc[OK_CASES[0].id, "status"] == "ok"
    samples = asv.loc[OK_CASES[0].id, "samples_s"]  # raw samples were saved and read back
    assert len(samples) == asv.loc[OK_CASES[0].id, "n"] >= 3
    assert asv.loc[OK_CASES[0].id, "median_s"] == pytest.approx(float(np.median(samples)))
    assert asv.loc[UNAVAILABLE_CASES[0].id, "status"] == "unavailable"
    assert asv.loc[OK_CASES[0].id, "tflops"] == pytest.approx(2 * 128**3 / asv.loc[OK_CASES[0].id, "median_s"] / 1e12)
    assert OK_CASES[2].id not in asv.index  # Conv2d's stored result is of an outdated benchmark version


def test_outdated_asv_results_are_named_in_a_warning(results):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_results(results / "asv")
    assert any("1 asv benchmark result(s) skipped" in str(w.message) for w in caught)


def test_pytest_benchmark_rows_use_its_stats_and_parbench_environment(frame, results):
    row = frame[frame["source"].eq("pytest-benchmark")].iloc[0]
    stats = json.loads((results / "pytest-benchmark" / "run.json").read_text())["benchmarks"][0]["stats"]
    assert row["median_s"] == stats["median"] and row["n"] == len(stats["data"]) == 12
    assert row["machine"] == "pytest-box" and row["check_passed"]


def test_corrupt_and_foreign_files_warn_by_name_and_the_rest_loads(results, tmp_path, frame):
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "foreign.json").write_text(json.dumps({"hello": "world"}))
    (tmp_path / "garbage.jsonl").write_text("not a record\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_results([results, tmp_path, tmp_path / "missing"])
    messages = [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]
    for name in ("broken.json", "foreign.json", "garbage.jsonl", "missing"):
        assert any(name in message for message in messages), name
    assert len(loaded) == len(frame)


def test_import_suites_loads_neither_pandas_nor_frameworks_until_called(results):
    code = ("import sys, suites; assert 'pandas' not in sys.modules; "
            f"frame = suites.load_results({str(results)!r}); "
            "assert not {'torch', 'tensorflow'} & set(sys.modules); print(len(frame))")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) > 0


def test_report_command_writes_one_self_contained_page_and_exports(results, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["report", str(results), "-o", str(out), "--csv", "--parquet"]) == 0
    html = (out / "index.html").read_text()
    assert "http://" not in html and "https://" not in html and "<link" not in html
    # charts live in the views (scaling, precision, % of peak, limits); a problem's table draws its
    # throughput as in-cell bars, so no chart repeats a table
    assert html.count("data:image/png;base64,") >= 1
    assert "ci-1thread" in html and "ci-2threads" in html and "injected fault" in html
    csv = pd.read_csv(out / "results.csv")
    loaded = load_results(results)
    assert len(csv) == len(loaded) and "cost_per_m_samples" in csv.columns
    # raw samples (read-only float arrays in the table) are exported as JSON lists of numbers
    assert [json.loads(cell) for cell in csv["samples_s"]] == [list(map(float, s)) for s in loaded["samples_s"]]
    assert not loaded["samples_s"].iloc[0].flags.writeable
    if (out / "results.parquet").exists():
        parquet = pd.read_parquet(out / "results.parquet")
        assert list(parquet.columns) == list(csv.columns)
        assert [list(s) for s in parquet["samples_s"]] == [list(map(float, s)) for s in loaded["samples_s"]]


def test_report_escapes_text_from_results(tmp_path):
    pytest.importorskip("torch")
    from tests.report_support import XSS_LABEL, run_machine

    run_machine(tmp_path / "results", XSS_LABEL, 1, cases=OK_CASES[:1], with_failure=False)
    assert main(["report", str(tmp_path / "results"), "-o", str(tmp_path / "out")]) == 0
    html = (tmp_path / "out" / "index.html").read_text()
    assert XSS_LABEL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_compare_flags_a_slower_machine_only_with_a_regression_gate(results, capsys):
    code = main(["compare", "ci-1thread", "ci-1thread", "--results", str(results), "--fail-on-regression", "0.05"])
    out = capsys.readouterr().out
    # Records measured beside other work make the gate inconclusive (exit 3), never a regression.
    assert (code, "no regression" in out) == (0, True) or (code, "inconclusive" in out) == (INCONCLUSIVE, True)
    frame = load_results(results)
    medians = frame[frame["status"].eq("ok") & frame["source"].eq("parbench")].pivot_table(
        index="case_id", columns="machine", values="median_s")
    slower, faster = ("ci-2threads", "ci-1thread") if medians["ci-2threads"].sum() > medians["ci-1thread"].sum() \
        else ("ci-1thread", "ci-2threads")
    assert main(["compare", faster, slower, "--results", str(results)]) == 0  # no gate, no failure
    capsys.readouterr()
    code = main(["compare", faster, slower, "--results", str(results), "--fail-on-regression", "0.0"])
    out = capsys.readouterr().out
    assert "B slower" in out or "same" in out
    assert code == (1 if "regression(s)" in out else INCONCLUSIVE if "inconclusive" in out else 0)


def test_compare_lists_cases_measured_on_one_side_only(results, capsys):
    assert main(["compare", "ci-1thread", "asv-box", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "only in A" in out and "both unavailable" in out


def test_compare_names_what_it_cannot_find(results, capsys):
    assert main(["compare", "no-such-machine", "ci-1thread", "--results", str(results)]) == 2
    assert "ci-1thread" in capsys.readouterr().err


def test_pre_0_5_asv_files_are_named_with_the_fix(tmp_path):
    old = tmp_path / "box" / "abc-env.json"
    old.parent.mkdir()
    old.write_text(json.dumps({"commit_hash": "abc", "env_name": "env", "params": {"machine": "box"},
                               "results": {}, "version": 1}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_results(tmp_path).empty
    assert any("abc-env.json" in str(w.message) and "asv update" in str(w.message) for w in caught)


def test_parquet_without_pyarrow_is_one_clear_line_before_any_work(results, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("suites.report.render.exports.parquet_available", lambda: False)
    assert main(["report", str(results), "-o", str(tmp_path / "out"), "--parquet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "pyarrow" in error
    assert not (tmp_path / "out").exists()


def test_report_baseline_option_pairs_rows_with_the_chosen_baseline(results, tmp_path):
    out = tmp_path / "reports"
    assert main(["report", str(results), "-o", str(out), "--baseline", "machine=ci-1thread",
                 "--baseline", "framework=torch", "--reference", "ci-2threads"]) == 0
    html = (out / "index.html").read_text()
    assert "Speedup vs baseline (machine=ci-1thread, framework=torch)" in html
    # The fixture's rows are real measurements on this host: where other work competed for its
    # cores (contended, starved, bimodal), the reference has nothing comparable and the page says so.
    reference = load_results(results).query("machine == 'ci-2threads' and status == 'ok'")
    if reference["comparable"].any():
        assert "Reference: ci-2threads · cpu×1 = 1.00" in html
    else:
        assert "No relative performance: reference &#39;ci-2threads&#39; has no comparable row" in html
    assert main(["report", str(results), "-o", str(out), "--baseline", "colour=blue"]) == 2


def test_asv_launched_cases_report_the_step_time_the_ranks_measured(tmp_path):
    """Multi-process cases have no asv `time_step`; their `track_rank_step_s` fills median_s."""
    case = Case.from_id("train_step/torch/cpu:2/ddp/fp32/batch=4,model=mlp")
    run = asv_results("box")
    index = {}
    for method, value in (("track_rank_step_s", 0.004), ("track_samples_per_s", 2000.0)):
        name = f"training.TrainStepLaunched.{method}"
        index[name] = add_asv_benchmark(run, name, "v1", [case], {case: value}, kind="track")
    save_asv(run, tmp_path / "asv", index)
    row = load_results(tmp_path).set_index("case_id").loc[case.id]
    assert row["status"] == "ok" and row["emulated"]
    assert row["median_s"] == 0.004 and row["samples_per_s"] == 2000.0


def test_asv_results_of_the_older_single_case_parameter_still_load(tmp_path):
    """Results of benchmarks whose one parameter, `case`, took case ids (before the named axes)."""
    from asv.runner import BenchmarkResult

    measured, unavailable = OK_CASES[0], UNAVAILABLE_CASES[0]
    run = asv_results("old-box")
    benchmark = {"name": "kernels.Matmul.time_step", "version": "v1", "type": "time", "param_names": ["case"],
                 "params": [[repr(measured.id), repr(unavailable.id)]]}
    run.add_result(benchmark, BenchmarkResult(result=[0.002, float("nan")], samples=[[0.002, 0.0021, 0.0019], None],
                                              number=[1, None], errcode=0, stderr="", profile=None),
                   record_samples=True)
    save_asv(run, tmp_path / "asv", {benchmark["name"]: benchmark})
    rows = load_results(tmp_path).set_index("case_id")
    assert set(rows.index) == {measured.id, unavailable.id}
    assert rows.loc[measured.id, "status"] == "ok" and rows.loc[measured.id, "median_s"] == 0.002
    assert rows.loc[measured.id, "n"] == 3
    assert rows.loc[unavailable.id, "status"] == "unavailable"
