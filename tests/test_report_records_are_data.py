"""Stored records are data: reading, reporting and comparing them needs no code of the model or
plugin that produced them, and the throughput a long run sustains is kept beside the median's."""
from __future__ import annotations

from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.frontends.cli import main
from suites.records.check import Check
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.store import ResultsStore
from suites.report.load.files import load_results
from suites.report.analyses.prices import PriceTable, add_costs

#: A user model registered only in the process that ran it (like the README's `poly` example).
UNREGISTERED = Case.make("train_step", "torch", "cpu", "single", "fp32", 1,
                         {"model": "someone-elses-model", "batch": 256})
#: Median 1 ms; one slow block in five (3 ms): the timed span says 1.4 ms per step sustained.
SAMPLES = (0.001, 0.001, 0.001, 0.001, 0.003) * 4
BATCH = 256


def store_runs(root: Path) -> None:
    store = ResultsStore(root)
    store.ensure_writable()
    for run_id in ("run-a", "run-b"):
        measurement = Measurement(samples=SAMPLES, block_size=10, timed_s=sum(SAMPLES) * 10)
        store.append(Record(
            case=UNREGISTERED, status=Status.OK, run_id=run_id, timestamp="2026-11-23T00:00:00+00:00",
            suite="mine", environment={"machine": "box", "cpu": {"model": "Some CPU", "usable_cores": 2}},
            measurement=measurement, check=Check(True, "grad_rel_l2_err", 1e-7, 1e-3),
            metrics={"samples_per_s": BATCH / measurement.median,
                     "samples_per_s_sustained": BATCH / measurement.sustained_step_s}))


@pytest.fixture
def results(tmp_path) -> Path:
    store_runs(tmp_path / "results")
    return tmp_path / "results"


def test_report_and_compare_read_records_of_a_model_this_process_does_not_know(results, tmp_path, capsys):
    assert main(["report", str(results), "-o", str(tmp_path / "report")]) == 0
    assert "someone-elses-model" in (tmp_path / "report" / "index.html").read_text()
    assert main(["compare", "run-a", "run-b", "--results", str(results)]) == 0
    assert "someone-elses-model" in capsys.readouterr().out


def test_throughput_uses_the_median_and_sustained_throughput_the_timed_span(results):
    row = load_results(results).iloc[0]
    assert row["throughput"] == pytest.approx(BATCH / 0.001)
    assert row["sustained_step_s"] == pytest.approx(0.0014)
    assert row["sustained_throughput"] == pytest.approx(BATCH / 0.0014)
    assert row["sustained_basis"] == "timed span"


def test_costs_are_paid_at_the_sustained_rate(results):
    frame = add_costs(load_results(results), PriceTable("USD", {"box": 3.6}, (), None, ("test",)))
    # 3.6 per hour = 0.001 per second; 1e6 samples at 256 / 1.4 ms per second
    assert frame.iloc[0]["cost_per_m_samples"] == pytest.approx(0.001 / (BATCH / 0.0014) * 1e6)


def test_a_row_whose_source_stored_no_check_is_usable_and_a_failed_check_is_not():
    import pandas as pd

    from suites.report.analyses.selection import usable
    frame = pd.DataFrame({"status": ["ok"] * 3, "throughput": [1.0] * 3,
                          "check_passed": pd.array([None, True, False], dtype="boolean")})
    assert usable(frame).index.tolist() == [0, 1]
