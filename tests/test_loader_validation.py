"""The loader's validation of what a results file stores, for every source (issue 43, "Nothing lost"):
one definition of a time and a count (`suites.records.seconds`); a parbench record kept with a
stored figure, a timestamp or a workload it cannot use, said once a file (`store.kept_note`,
`parbench.unregistered_workload`); an ok record without a measurement, a pytest-benchmark row of
no rounds, an asv result that is no figure left out, said; a foreign file with no parbench case,
an asv results file without result_columns or beside a benchmarks.json that cannot be read, one
line. Files are written here; nothing is measured."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest

from suites.cases.case import Case
from suites.records.seconds import count_problem, is_seconds, seconds_problem
from suites.records.store import ResultsWarning, numbered_records, stored_problem, timestamp_problem
from suites.report.load import files
from tests.test_report_bad_records import record

CASE = Case.make("matmul", "torch", "cpu", params={"m": 8, "n": 8, "k": 8})


def loaded(paths: list[Path]) -> tuple[list[str], list[str]]:
    """(the case ids loaded from `paths`, the ResultsWarnings said), as `parbench report` reads them:
    with the work of each case (`case_work`), which tells a workload registered here."""
    from suites.strategies.jobs import case_work

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = files.load_results(paths, case_work)
    return sorted(frame["case_id"]), [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]


# --- one definition of a time and a count ------------------------------------------------------

@pytest.mark.parametrize("value, ok", [(0, True), (1.5e-6, True), (None, True), (float("inf"), False),
                                       (float("nan"), False), (-1, False), ("fast", False), (True, False)])
def test_a_time_is_a_finite_number_of_seconds_or_absent(value: Any, ok: bool) -> None:
    assert (seconds_problem("stats.median", value) == "") is ok
    if not ok:
        assert seconds_problem("stats.median", value).startswith(f"stats.median is {value!r}, not a time in seconds")
    assert is_seconds(value) is (ok and value is not None)


@pytest.mark.parametrize("value, ok", [(1, True), (10.0, True), (None, True), (0, False), (1.5, False),
                                       (float("inf"), False), ("3", False), (True, False)])
def test_a_count_is_a_whole_number_of_at_least_its_least(value: Any, ok: bool) -> None:
    assert (count_problem("stats.rounds", value) == "") is ok
    assert count_problem("n", 0, least=0) == ""


# --- parbench records: kept with a field ignored, or left out -----------------------------------

def line(change: Callable[[dict[str, Any]], None], index: int = 9) -> str:
    data = record(index).to_dict()
    change(data)
    return json.dumps(data)


def records(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "records-box.jsonl"
    path.write_text("".join(text + "\n" for text in (json.dumps(record(0).to_dict()), *lines)))
    return path


def set_measurement(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["measurement"].update(fields)


@pytest.mark.parametrize("fields, said", [
    ({"median_s": float("inf")}, "measurement.median_s is inf, not a time in seconds (a finite number >= 0)"),
    ({"median_s": -1.0}, "measurement.median_s is -1.0, not a time in seconds"),
    ({"median_s": "fast"}, "measurement.median_s is 'fast', not a time in seconds"),
    ({"median_s": 5.0}, "measurement.median_s is 5 s, but its samples' median is 0.001 s"),
    ({"iqr_s": -2}, "measurement.iqr_s is -2, not a time in seconds"),
    ({"n": 0}, "measurement.n is 0, not a count (a whole number >= 1)"),
    ({"noisy": "yes"}, "measurement.noisy is 'yes', not true/false"),
])
def test_a_stored_figure_that_is_no_figure_is_ignored_and_the_record_kept(tmp_path, fields, said) -> None:
    path = records(tmp_path, line(set_measurement(**fields)))
    cases, warned = loaded([path])
    assert cases == sorted([record(0).case.id, record(9).case.id])  # kept: its figures come from its samples
    assert len(warned) == 1 and warned[0].startswith(f"{path}: line 2: {said}"), warned
    assert warned[0].endswith("that stored figure is ignored: the record is kept, its figures computed from its "
                              "samples")


def test_the_report_ranks_a_kept_record_by_its_samples_not_its_stored_median(tmp_path) -> None:
    path = records(tmp_path, line(set_measurement(median_s=-1.0), index=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = files.load_results([path])
    assert frame["median_s"].tolist() == pytest.approx([1e-3, 1e-3])


def test_a_file_of_many_such_lines_is_one_warning_with_how_many_more(tmp_path) -> None:
    bent = [line(set_measurement(median_s=-1.0), index) for index in (1, 2, 3)]
    path = records(tmp_path, *bent, line(lambda data: data.update(timestamp="yesterday"), 4))
    cases, warned = loaded([path])
    assert len(cases) == 5
    assert warned == [f"{path}: line 2: measurement.median_s is -1.0, not a time in seconds (a finite number >= 0); "
                      f"that stored figure is ignored: the record is kept, its figures computed from its samples; "
                      f"and 3 more line(s) of it likewise kept"]


def test_a_timestamp_that_is_no_time_keeps_the_record_with_its_time_unknown(tmp_path) -> None:
    path = records(tmp_path, line(lambda data: data.update(timestamp="yesterday")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = files.load_results([path])
    assert len(frame) == 2 and frame["timestamp"].isna().sum() == 1
    assert [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)] == [
        f"{path}: line 2: timestamp 'yesterday' is not an ISO 8601 time (when the case finished); the record is "
        f"kept, its time unknown"]


@pytest.mark.parametrize("timestamp", ["2026-01-01T00:00:00+00:00", "2026-11-28T00:00:00Z", "2026-11-24T10:00:00"])
def test_iso_times_are_times(timestamp: str) -> None:
    assert timestamp_problem(timestamp) == ""


def test_an_ok_record_without_a_measurement_is_left_out_as_a_bad_line(tmp_path) -> None:
    path = records(tmp_path, line(lambda data: data.update(measurement=None)))
    cases, warned = loaded([path])
    assert cases == [record(0).case.id]
    assert warned == [f"{path}:2: not a parbench record (ValueError: status ok without a measurement (an ok record "
                      f"stores the samples its figures come from)); line skipped"]


def test_an_unavailable_record_without_a_measurement_is_no_bad_line(tmp_path) -> None:
    path = records(tmp_path, line(lambda data: data.update(status="unavailable", measurement=None, reason="no gpu")))
    assert loaded([path]) == (sorted([record(0).case.id, record(9).case.id]), [])


def test_a_workload_not_registered_here_is_kept_with_what_it_stored_and_said(tmp_path) -> None:
    def unknown(data: dict[str, Any]) -> None:
        data["case"].update(workload="nosuch", id=data["case"]["id"].replace("matmul", "nosuch", 1))
    path = records(tmp_path, line(unknown))
    cases, warned = loaded([path])
    assert len(cases) == 2 and any(case.startswith("nosuch/") for case in cases)
    assert warned == [f"{path}: line 2: case.workload 'nosuch' is not registered here (a plugin's? name its file in "
                      f"PARBENCH_PLUGINS); the record is kept with the figures it stored, its work unknown"]


def test_a_registered_plugin_workload_is_said_nothing_of(tmp_path, monkeypatch) -> None:
    from suites import workloads

    monkeypatch.setitem(workloads.WORKLOADS, "nosuch", workloads.WORKLOADS["matmul"])
    path = records(tmp_path, line(lambda data: data["case"].update(workload="nosuch")))
    assert loaded([path])[1] == []


def test_a_model_not_registered_here_is_no_unknown_workload(tmp_path) -> None:
    """A user's model of train_step (`test_report_records_are_data`): its work is unknown too, but
    the workload is registered: nothing to say."""
    def model(data: dict[str, Any]) -> None:
        data["case"] = Case.make("train_step", "torch", "cpu", params={"model": "someone-elses-model",
                                                                        "batch": 8}).to_dict()
    assert loaded([records(tmp_path, line(model))])[1] == []


def test_without_the_work_of_cases_a_workload_is_not_judged(tmp_path) -> None:
    path = records(tmp_path, line(lambda data: data["case"].update(workload="nosuch")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(files.load_results([path])) == 2
    assert not [w for w in caught if issubclass(w.category, ResultsWarning)]


def test_the_store_says_the_same_to_every_reader(tmp_path) -> None:
    """`numbered_records` (compare, predict, the memory table) keeps and says as the report does."""
    path = records(tmp_path, line(set_measurement(median_s=float("inf"))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        numbers = [number for number, _ in numbered_records(path)]
    assert numbers == [1, 2] and len(caught) == 1 and ": line 2: measurement.median_s is inf" in str(caught[0].message)


def test_stored_figures_that_agree_with_their_samples_are_no_problem() -> None:
    data = record(3).to_dict()
    assert stored_problem(data["measurement"], record(3)) == ""
    assert stored_problem({}, record(3)) == ""  # a version-1 record without them


# --- pytest-benchmark ------------------------------------------------------------------------------

def benchmark(name: str, stats: dict[str, Any] | None = None, case: Case | None = CASE) -> dict[str, Any]:
    sound = {"median": 1e-3, "mean": 1.1e-3, "iqr": 1e-4, "q1": 0.95e-3, "q3": 1.05e-3, "rounds": 3,
             "data": [1e-3, 1.1e-3, 0.9e-3]}
    extra = {"case": case.to_dict(), "status": "ok"} if case else {}
    return {"name": name, "stats": {**sound, **(stats or {})}, "extra_info": extra}


def pytest_benchmark_file(tmp_path: Path, *benchmarks: dict[str, Any]) -> Path:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"machine_info": {"node": "box"}, "commit_info": {}, "datetime": "2026-01-01T00:00:00",
                                "benchmarks": list(benchmarks)}))
    return path


def test_a_benchmark_of_no_rounds_is_left_out(tmp_path) -> None:
    other = Case.make("matmul", "torch", "cpu", params={"m": 16, "n": 8, "k": 8})
    path = pytest_benchmark_file(tmp_path, benchmark("none", {"rounds": 0, "data": []}), benchmark("good", case=other))
    assert loaded([path]) == ([other.id], [f"{path}: benchmark 'none': stats.rounds is 0, not a count (a whole number "
                                           f">= 1): no round timed; row skipped"])


def test_a_file_of_several_refused_benchmarks_is_one_line(tmp_path) -> None:
    path = pytest_benchmark_file(tmp_path, *(benchmark(f"b{i}", {"median": -1}) for i in range(3)))
    assert loaded([path])[1] == [f"{path}: benchmark 'b0': stats.median is -1, not a time in seconds (a finite number "
                                 f">= 0); row skipped; and 2 more benchmark(s) of it skipped"]


def test_another_projects_pytest_benchmark_json_is_said(tmp_path) -> None:
    path = pytest_benchmark_file(tmp_path, benchmark("test_x", case=None), benchmark("test_y", case=None))
    assert loaded([path]) == ([], [f"{path}: pytest-benchmark JSON without a parbench benchmark (none of its 2 "
                                   f"benchmark(s) has a parbench case in extra_info: another project's, or run "
                                   f"without parbench's pytest plugin?); skipped"])


def test_a_benchmark_of_another_project_beside_parbenchs_is_passed_over_without_a_word(tmp_path) -> None:
    path = pytest_benchmark_file(tmp_path, benchmark("mine"), benchmark("test_x", case=None))
    assert loaded([path]) == ([CASE.id], [])


# --- asv -------------------------------------------------------------------------------------------

AXES_PARAMS = [["'torch'"], ["'cpu:1'"], ["'single'"], ["'fp32'"], ["'k=8,m=8,n=8'", "'k=8,m=16,n=8'"]]
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_q_25", "stats_q_75", "stats_repeat",
           "samples"]


def asv_file(tmp_path: Path, results: dict[str, list[Any]] | None = None, index: str | None = None,
             **replaced: Any) -> Path:
    """An asv results file of `kernels.Matmul.time_step` over two cases (the first measured, the second
    skipped: NaN), or `results`; `index` as its benchmarks.json where given."""
    measured = [[1e-3, float("nan")], AXES_PARAMS, "v1", 1700000000000, 1.0, [0.9e-3, None], [1.1e-3, None],
                [3, None], [[1e-3, 0.9e-3, 1.1e-3], None]]
    data = {"commit_hash": "abc123", "env_name": "virtualenv-py3.11", "date": 1700000000000, "python": "3.11",
            "params": {"machine": "box"}, "requirements": {}, "result_columns": COLUMNS,
            "results": results if results is not None else {"kernels.Matmul.time_step": measured},
            "durations": {}, "version": 2, **replaced}
    folder = tmp_path / "asv" / "box"
    folder.mkdir(parents=True, exist_ok=True)
    if index is not None:
        (tmp_path / "asv" / "benchmarks.json").write_text(index)
    (folder / "abc.json").write_text(json.dumps(data))
    return folder / "abc.json"


def test_asv_results_of_a_parbench_case_load_without_a_word(tmp_path) -> None:
    assert loaded([asv_file(tmp_path)]) == (["matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8"], [])


@pytest.mark.parametrize("position, value, said", [
    (0, ["fast", float("nan")], "result is 'fast', not a time in seconds (a finite number >= 0)"),
    (0, [float("inf"), float("nan")], "result is inf, not a time in seconds"),
    (0, [-1e-3, float("nan")], "result is -0.001, not a time in seconds"),
    (8, [[1e-3, "x"], None], "samples is [0.001, 'x'], not a list of times in seconds"),
    (5, [-1, None], "stats_q_25 is -1, not a time in seconds"),
])
def test_an_asv_result_that_is_no_figure_leaves_its_case_out(tmp_path, position, value, said) -> None:
    path = asv_file(tmp_path)
    data = json.loads(path.read_text())
    data["results"]["kernels.Matmul.time_step"][position] = value
    path.write_text(json.dumps(data))
    cases, warned = loaded([path])
    assert cases == [] and len(warned) == 1
    assert warned[0].startswith(f"{path}: benchmark 'kernels.Matmul.time_step' "
                                f"(matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8): {said}"), warned
    assert warned[0].endswith("; row skipped")


def test_asv_results_of_other_benchmarks_only_are_said(tmp_path) -> None:
    path = asv_file(tmp_path, {"suites_asv.Matmul.time_case": [[float("nan")], [["'x'"]], "v1", 1700000000000, 1.0,
                                                                None, None, None, None]})
    assert loaded([path]) == ([], [f"{path}: asv results without a parbench case (none of its 1 benchmark result(s) "
                                   f"times a parbench case: another project's?); skipped"])


def test_asv_benchmarks_of_parbench_that_are_no_case_beside_its_cases_are_passed_over(tmp_path) -> None:
    path = asv_file(tmp_path)
    data = json.loads(path.read_text())
    data["results"]["predict.Predict.time_project_1000_targets"] = [1.0, [], "v1", 1700000000000, 1.0,
                                                                   None, None, None, None]
    path.write_text(json.dumps(data))
    assert loaded([path])[1] == []


@pytest.mark.parametrize("columns, said", [
    (None, "asv results whose result_columns is None, not a list of column names"),
    ("result", "asv results whose result_columns is 'result', not a list of column names"),
])
def test_asv_results_without_usable_result_columns_are_one_line(tmp_path, columns, said) -> None:
    path = asv_file(tmp_path, result_columns=columns)
    assert loaded([path]) == ([], [f"{path}: {said}; skipped"])


@pytest.mark.parametrize("index", ["{", "[1, 2]"])
def test_asv_results_beside_a_benchmarks_json_that_cannot_be_read_are_skipped_said(tmp_path, index) -> None:
    path = asv_file(tmp_path, index=index)
    cases, warned = loaded([path])
    assert cases == [] and len(warned) == 1
    assert warned[0].startswith(f"{path}: its {tmp_path / 'asv' / 'benchmarks.json'} is ")
    assert "remove it to read every result unchecked; skipped" in warned[0]


def test_asv_results_without_a_benchmarks_json_are_read_unchecked(tmp_path) -> None:
    assert loaded([asv_file(tmp_path)])[1] == [] and not (tmp_path / "asv" / "benchmarks.json").exists()
