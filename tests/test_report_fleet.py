"""The fleet benchmark (benchmarks/report_fleet.py) as a test: a 10-machine fleet generated from
the H100 sample records builds, and its page stays small. No wall-clock assertion: the time is
the benchmark's to report (asv's ReportFleet10), not a test's to judge on a shared machine."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from benchmarks.report_fleet import SAMPLE, build, machine_label, sample_records, write_fleet

#: index.html of the 10-machine fleet measured 2.9 MB after the report's size work (14.8 MB
#: before); the bound leaves ~40% margin, and fails long before the old size returns.
HTML_BOUND_BYTES = 4_000_000


def test_the_fleet_is_deterministic_and_relabelled(tmp_path):
    first = write_fleet(tmp_path / "a", 2)
    again = write_fleet(tmp_path / "b", 2)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]  # seeded: same fleet
    assert [p.name for p in first] == [f"records-{machine_label(i)}.jsonl" for i in range(2)]
    records = [json.loads(line) for line in first[1].read_text().splitlines()]
    assert len(records) == len(sample_records(SAMPLE))
    assert {r["environment"]["machine"] for r in records} == {machine_label(1)}
    assert sum(r["status"] == "failed" for r in records) == 3  # the sample's 2, and one made here
    assert sum(bool(r.get("emulated")) for r in records) == 1
    assert sum(bool((r.get("contention") or {}).get("contended")) for r in records) == 2


def test_ten_machines_build_and_the_page_stays_small(tmp_path):
    write_fleet(tmp_path / "fleet", 10)
    figures = build(tmp_path / "fleet", tmp_path / "report", timeout=300)
    html = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert html.rstrip().endswith("</html>")
    assert all(machine_label(i) in html for i in range(10))
    size = len(html.encode("utf-8"))
    assert size < HTML_BOUND_BYTES, f"index.html of 10 machines is {size / 1e6:.2f} MB"
    assert figures["written_mb"] * 1e6 < HTML_BOUND_BYTES


def test_records_loaded_in_batches_make_the_same_table_as_loaded_at_once(tmp_path, monkeypatch):
    """A fleet is tidied in batches of rows (its records as dicts would take ~20x the table's
    memory): the table is the same, parameters that only some batches have included."""
    from suites.report.load import files as loading

    data = Path(__file__).resolve().parent / "data"
    files = []
    for name in ("h100-sample", "epyc-cpu-sample"):
        target = tmp_path / f"{name}.jsonl"
        target.write_text(gzip.open(data / name / "records.jsonl.gz", "rt", encoding="utf-8").read(), encoding="utf-8")
        files.append(target)
    whole = loading.load_files(files)
    monkeypatch.setattr(loading, "BATCH_ROWS", 40)
    batched = loading.load_files(files)
    pd.testing.assert_frame_equal(whole, batched)
    assert {"param_m", "param_model"} <= set(batched.columns)


def test_a_view_of_the_report_frame_is_made_once_and_a_callers_edit_stays_its_own(monkeypatch):
    """Every section asks the frame for the same views; at a fleet's size each is a copy of most of
    the table, so it is made once, and a section's edit to its copy reaches no other section."""
    from suites.report.analyses import selection
    from tests.test_report_analysis import frame_of, matmul, row, table

    made = []
    real = selection.latest
    monkeypatch.setattr(selection, "latest", lambda rows: made.append(len(rows)) or real(rows))
    frame = frame_of(table(row(matmul(), 1e-3, "a", time="2026-01-01T00:00:00+00:00", run="old"),
                           row(matmul(), 2e-3, "a", time="2026-01-02T00:00:00+00:00", run="new"),
                           row(matmul(), 3e-3, "b")))
    first = frame.latest
    assert sorted(first["run_id"]) == ["new", "r1"]
    first["run_id"] = "edited"
    first["extra"] = 1
    again = frame.latest
    assert sorted(again["run_id"]) == ["new", "r1"] and "extra" not in again
    assert len(frame.usable) == 2 and len(frame.comparable) == 2
    assert made == [3]  # one selection over the three records, however often a view is asked
