"""CPU contention: read from a fake /proc/stat and a fake load average (controlled values, no
clock), judged by the one rule, stored in the record, shaded and explained in the report."""
from __future__ import annotations

from pathlib import Path

import pytest

from suites.cases.vocabulary import Status
from suites.records.contention import Contention, CpuReading, judge, read_cpu
from suites.records.measurement import Measurement
from suites.records.store import ResultsStore
from suites.report.analyses.prices import PriceTable
from suites.report.sections import problems
from suites.runner import runner
from suites.runner.execute import Outcome
from suites.runner.runner import RunContext, Runner
from tests.report_support import TINY
from tests.test_report_analysis import frame_of, matmul, options, row, table


def proc_stat(tmp_path: Path, total_but_steal: int, steal: int) -> Path:
    """A /proc/stat whose aggregate line has `steal` jiffies stolen and `total_but_steal` others."""
    path = tmp_path / f"stat-{total_but_steal}-{steal}"
    user = total_but_steal - 10
    path.write_text(f"cpu  {user} 0 5 5 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n")
    return path


def test_a_reading_takes_the_1_minute_load_and_the_steal_column(tmp_path):
    reading = read_cpu(proc_stat(tmp_path, 1000, 30), loadavg=lambda: (2.5, 1.0, 0.5))
    assert reading == CpuReading(2.5, 1030, 30)


def test_an_unreadable_stat_or_load_average_is_unknown_not_zero(tmp_path):
    def no_loadavg():
        raise OSError("not available")

    reading = read_cpu(tmp_path / "missing", loadavg=no_loadavg)
    assert reading == CpuReading(None, None, None)
    verdict = judge(reading, reading, cores=2)
    assert not verdict.contended and verdict.steal_fraction is None and verdict.load_after is None


@pytest.mark.parametrize("load_before, load_after, steal_after, contended, why", [
    (1.9, 2.4, 0, False, ""),  # the case itself keeping both cores busy
    (2.0, 4.1, 0, True, "load average 4.1 on 2 cores"),  # two more runnable tasks than cores
    (4.0, 2.2, 0, True, "load average 4.0 on 2 cores"),  # a busy minute before the case
    (1.0, 1.2, 100, True, "10% of CPU time stolen by the hypervisor"),  # 100 of 1000 jiffies
    (1.0, 1.2, 40, False, ""),  # 4% stolen: below the limit
])
def test_the_rule_marks_a_case_contended_and_says_why(tmp_path, load_before, load_after, steal_after,
                                                       contended, why):
    before = read_cpu(proc_stat(tmp_path, 5000, 0), loadavg=lambda: (load_before, 0.0, 0.0))
    after = read_cpu(proc_stat(tmp_path, 5000 + 1000 - steal_after, steal_after),
                     loadavg=lambda: (load_after, 0.0, 0.0))
    verdict = judge(before, after, cores=2)
    assert (verdict.contended, verdict.why) == (contended, why)
    assert verdict.steal_fraction == pytest.approx(steal_after / 1000)


def test_run_case_stores_the_readings_around_the_case_and_the_verdict(tmp_path, monkeypatch):
    readings = iter([CpuReading(1.0, 1000, 0), CpuReading(5.0, 2000, 0)])
    monkeypatch.setattr(runner, "read_cpu", lambda: next(readings))
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    context = RunContext(suite="t", store=ResultsStore(tmp_path), timing=TINY, label="busy")
    context.store.ensure_writable()
    measured = Outcome(Status.OK, measurement=Measurement((1e-3,) * 5))
    Runner.storing(context, launcher=lambda job, timing: measured).run(matmul())
    (stored,) = ResultsStore(tmp_path).load()
    assert stored.contention == Contention(1.0, 5.0, 0.0, 2, True, "load average 5.0 on 2 cores")


def test_the_report_shades_a_contended_row_and_says_why_in_it():
    frame = frame_of(table(row(matmul(), 1e-3, "quiet", contended=False),
                           row(matmul(), 3e-3, "busy", contended=True, contention="load average 4.1 on 2 cores")),
                     PriceTable.load())
    (section,) = problems.build(frame, options(PriceTable.load()))
    (rows,) = [t.rows for t in section.tables]
    column = section.tables[0].headers.index("flags / not comparable")
    by_text = {cells[column].text: cells[0].css for cells in rows}
    (busy,) = [text for text in by_text if "load average 4.1 on 2 cores" in text]
    assert busy == "contended (load average 4.1 on 2 cores)"
    assert "noisy" in by_text[busy] and "noisy" not in by_text[""]
