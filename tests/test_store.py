"""Results store: round trip, corrupt lines, concurrent appends, kill safety, unwritable paths."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.records.check import Check
from suites.records.measurement import Measurement
from suites.records.record import SCHEMA_VERSION, Record
from suites.records.store import ResultsStore, ResultsWarning, load_records


def make_record(index: int, machine: str = "box") -> Record:
    case = Case.make("matmul", "torch", "cpu", params={"m": 8 + index, "n": 8, "k": 8})
    return Record(case=case, status=Status.OK, run_id="r1", timestamp="2026-01-01T00:00:00+00:00",
                  suite="t", environment={"machine": machine},
                  measurement=Measurement(samples=(1e-3, 1.1e-3, 0.9e-3)), metrics={"tflops": 1.0},
                  check=Check(True, "max_rel_err", 1e-7, 1e-4))


def test_round_trip_keeps_every_sample_and_the_check(results_dir):
    store = ResultsStore(results_dir)
    store.ensure_writable()
    store.append(make_record(0))
    (loaded,) = store.load()
    assert loaded.measurement.samples == (1e-3, 1.1e-3, 0.9e-3)
    assert loaded.check.passed and loaded.case == make_record(0).case
    assert json.loads(store.files()[0].read_text())["schema"] == SCHEMA_VERSION == 3
    assert loaded.schema == SCHEMA_VERSION


def test_corrupt_line_is_skipped_with_file_and_line(results_dir):
    store = ResultsStore(results_dir)
    store.ensure_writable()
    store.append(make_record(0))
    with open(store.files()[0], "a") as handle:
        handle.write('{"truncated": \n')
        handle.write("cos(1)\n")
    store.append(make_record(1))
    with pytest.warns(ResultsWarning) as caught:
        records = store.load()
    assert len(records) == 2
    messages = [str(w.message) for w in caught]
    assert any(f"{store.files()[0]}:2:" in m for m in messages)
    assert any(f"{store.files()[0]}:3:" in m for m in messages)


def test_unreadable_or_missing_file_warns_and_rest_loads(results_dir, tmp_path):
    store = ResultsStore(results_dir)
    store.ensure_writable()
    store.append(make_record(0))
    with pytest.warns(ResultsWarning, match="cannot read"):
        records = list(load_records([tmp_path / "missing.jsonl", *store.files()]))
    assert len(records) == 1


def test_results_path_under_a_regular_file_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot create results directory .*--results"):
        ResultsStore(blocker / "results").ensure_writable()


def _append_many(root: str, worker: int, count: int) -> None:
    store = ResultsStore(root)
    for i in range(count):
        store.append(make_record(worker * 1000 + i))


def test_two_writers_at_once_lose_nothing(results_dir):
    ResultsStore(results_dir).ensure_writable()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(results_dir), w, 200)) for w in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    records = ResultsStore(results_dir).load()
    assert len(records) == 400
    assert len({r.case for r in records}) == 400


def test_killing_a_run_keeps_every_finished_record(results_dir):
    """SIGKILL a writer mid-stream: every line in the file is a whole, loadable record."""
    code = (f"from tests.test_store import _append_many; _append_many({str(results_dir)!r}, 0, 100000)")
    ResultsStore(results_dir).ensure_writable()
    process = subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)))
    path = ResultsStore(results_dir).path_for("box")
    deadline = time.time() + 30
    while time.time() < deadline and (not path.exists() or path.stat().st_size < 20000):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    lines = path.read_text().splitlines()
    assert len(lines) > 5
    for line in lines:
        Record.from_dict(json.loads(line))  # raises if any line were partial


def test_append_after_a_torn_line_starts_a_new_line_and_both_good_records_load(results_dir):
    store = ResultsStore(results_dir)
    store.ensure_writable()
    path = store.append(make_record(0))
    with open(path, "a") as handle:
        handle.write('{"schema": 2, "case": {"workl')  # a write cut short: no newline
    with pytest.warns(ResultsWarning, match="ends in a partial line"):
        store.append(make_record(1))
    with pytest.warns(ResultsWarning, match=f"{path}:2: not a parbench record"):
        records = store.load()
    assert [r.case for r in records] == [make_record(0).case, make_record(1).case]
    store.append(make_record(2))  # the file ends in a newline again: no warning, no blank line
    assert path.read_text().count("\n") == 4
