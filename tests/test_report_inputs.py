"""What the report reads, and says it passed over: records with a byte-order mark or gzipped, a FIFO
where a records file should be, pytest-benchmark JSON whose stats are no times, a price table of an
unknown version or with an unknown entry, and the sample records parbench ships (read only where
named). Each is one line naming the file and why; nothing else is lost. Records are built directly."""
from __future__ import annotations

import gzip
import json
import os
import warnings
from pathlib import Path

import pytest

from suites.errors import UserError
from suites.frontends.cli import main
from suites.records.store import ResultsWarning
from suites.report.analyses.prices import PriceTable
from suites.report.load import files
from tests.test_report_bad_records import good_lines, record


def loaded(paths: list[Path]) -> tuple[list[str], list[str]]:
    """(the case ids loaded from `paths`, the ResultsWarnings said), as `parbench report` reads them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = files.load_results(paths)
    return sorted(frame["case_id"]), [str(w.message) for w in caught if issubclass(w.category, ResultsWarning)]


def ids(*indices: int) -> list[str]:
    return sorted(record(index).case.id for index in indices)


def test_a_records_file_with_a_byte_order_mark_keeps_its_first_record(tmp_path):
    path = tmp_path / "records-box.jsonl"
    path.write_bytes("\ufeff".encode() + "".join(line + "\n" for line in good_lines("box", range(2))).encode())
    assert loaded([path]) == (ids(0, 1), [])


def test_gzipped_records_are_read_in_a_folder_and_named(tmp_path):
    with gzip.open(tmp_path / "records.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in good_lines("box", range(3))))
    assert loaded([tmp_path]) == (ids(0, 1, 2), [])
    assert loaded([tmp_path / "records.jsonl.gz"]) == (ids(0, 1, 2), [])


def test_a_broken_gzip_is_one_line_and_the_other_files_load(tmp_path):
    (tmp_path / "cut.jsonl.gz").write_bytes(b"\x1f\x8b not really gzip")
    (tmp_path / "records-box.jsonl").write_text("".join(line + "\n" for line in good_lines("box", range(2))))
    cases, said = loaded([tmp_path])
    assert cases == ids(0, 1)
    assert len(said) == 1 and said[0].startswith(f"{tmp_path / 'cut.jsonl.gz'}: cannot read (") and "skipped" in said[0]


def test_a_fifo_named_like_records_is_skipped_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "records-x.jsonl")  # opening it to read would block until a writer came
    (tmp_path / "records-box.jsonl").write_text("".join(line + "\n" for line in good_lines("box", range(2))))
    cases, said = loaded([tmp_path])
    assert cases == ids(0, 1)
    assert said == [f"{tmp_path / 'records-x.jsonl'}: not a regular file (a FIFO, socket or device: reading it "
                    f"could wait forever); skipped"]
    assert loaded([tmp_path / "records-x.jsonl"])[1] == said


def test_a_folder_without_results_files_says_so(tmp_path):
    (tmp_path / "README.md").write_text("nothing measured here")
    assert loaded([tmp_path]) == ([], [f"{tmp_path}: no results file in it (parbench records *.jsonl or "
                                       f"*.jsonl.gz, asv or pytest-benchmark *.json); skipped"])


def pytest_benchmark_json(path: Path, stats: dict) -> Path:
    """A pytest-benchmark file of two benchmarks of parbench's: `bad` with `stats`, `good` a sound one."""
    sound = {"median": 1e-3, "mean": 1.1e-3, "iqr": 1e-4, "q1": 0.95e-3, "q3": 1.05e-3, "rounds": 5,
             "data": [1e-3, 1.1e-3, 0.9e-3, 1e-3, 1.2e-3]}
    benchmarks = [{"name": name, "stats": figures, "extra_info": {"case": record(index).case.to_dict(),
                                                                   "status": "ok"}}
                  for index, (name, figures) in enumerate((("bad", stats), ("good", sound)))]
    path.write_text(json.dumps({"machine_info": {"node": "box"}, "commit_info": {}, "datetime": "2026-01-01T00:00:00",
                                "benchmarks": benchmarks}))
    return path


@pytest.mark.parametrize("stats, why", [
    ({"median": -1, "mean": 1e-3}, "stats.median is -1, not a time in seconds (a finite number >= 0)"),
    ({"median": 1e-3, "mean": "fast"}, "stats.mean is 'fast', not a time in seconds (a finite number >= 0)"),
    ({"median": 0.0}, "no median step time (stats.median > 0 s)"),
    ({"median": 1e-3, "data": [1e-3, float("nan")]}, "stats.data holds a value that is not a time in seconds"),
])
def test_pytest_benchmark_stats_that_are_no_times_refuse_their_row(tmp_path, stats, why):
    path = pytest_benchmark_json(tmp_path / "0001_run.json", stats)
    assert loaded([path]) == (ids(1), [f"{path}: benchmark 'bad': {why}; row skipped"])


def test_a_pytest_benchmark_case_on_no_device_refuses_its_row(tmp_path):
    path = pytest_benchmark_json(tmp_path / "0001_run.json", {"median": 1e-3})
    data = json.loads(path.read_text())
    data["benchmarks"][0]["extra_info"]["case"]["n_devices"] = -4
    path.write_text(json.dumps(data))
    assert loaded([path]) == (ids(1), [f"{path}: benchmark 'bad': case n_devices -4 is not a device count (a whole "
                                       f"number >= 1); row skipped"])


def test_the_shipped_samples_are_read_only_where_named(tmp_path, monkeypatch):
    results, samples = tmp_path / "results", tmp_path / "results" / "samples"
    samples.mkdir(parents=True)
    monkeypatch.setattr(files, "SHIPPED_SAMPLES", samples.resolve())
    (results / "records-mine.jsonl").write_text(good_lines("mine", range(1))[0] + "\n")
    (samples / "records-h200.jsonl").write_text(good_lines("h200", range(1, 2))[0] + "\n")
    passed_over = (f"{samples}: the sample records parbench ships, read only where named (pass {samples} as well to "
                   f"compare with them); skipped")
    assert loaded([results]) == (ids(0), [passed_over])
    assert loaded([results, samples]) == (ids(0, 1), [])  # named as well: read, and nothing to say
    assert loaded([samples]) == (ids(1), [])


def price_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, problem", [
    ("version = 99\n", "version: 99 is not a price table version this parbench reads (1, 2, 3)"),
    ("[gpus]\nH100 = 2.0\n", "gpus: not an entry of a price table (it has version, currency, date, machines, device, "
                             "cpu)"),
])
def test_a_price_table_of_an_unknown_version_or_entry_is_refused_in_one_line(tmp_path, capsys, text, problem):
    path = price_file(tmp_path, text)
    way_out = "fix the file, or drop --prices / unset PARBENCH_PRICES"
    with pytest.raises(UserError) as refused:
        PriceTable.load(path)
    assert str(refused.value) == f"price table {path}: {problem}; {way_out}"
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "records-box.jsonl").write_text(good_lines("box", range(1))[0] + "\n")
    assert main(["report", str(tmp_path / "results"), "--prices", str(path), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"parbench: error: {refused.value}"]
    assert PriceTable.load(price_file(tmp_path, "version = 2\n[machines]\nbox = 3.0\n")).machines["box"] == 3.0


def test_the_shipped_price_table_is_a_version_this_parbench_reads():
    assert PriceTable.load().currency == "USD"


def test_compare_reads_a_records_file_with_a_byte_order_mark_whole(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes("\ufeff".encode() + "".join(line + "\n" for line in good_lines("a", range(2))).encode())
    b.write_text("".join(line + "\n" for line in good_lines("b", range(2))) + "\n")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert all(case in out for case in ids(0, 1)) and "only in" not in out

