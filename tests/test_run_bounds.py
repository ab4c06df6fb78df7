"""A run's bounds: `--max-minutes` leaves out what would not fit and says so; a case that cannot
finish inside its limit is stopped there, and the run goes on."""
from __future__ import annotations

import json

import pytest

from suites.cases.vocabulary import DeviceKind, Status
from suites.frontends.cli import main
from suites.frontends.commands import run as run_command
from suites.kept.store import ResultsStore

#: Three CPU matmuls (the first one small) and a GPU one, unavailable here: it costs nothing.
GRID = """
[timing]
warmup_s = 0.02
block_min_s = 0.002
min_samples = 3
min_time_s = 0.01
budget_s = 0.2
[[grid]]
workload = "matmul"
framework = "torch"
device = ["cpu", "gpu"]
params = { m = [8, 16, 24], n = 8, k = 8 }
"""

#: What each case costs on the controlled clock: far more than its estimate (under a second).
CASE_S = 50.0


@pytest.fixture
def controlled_clock(monkeypatch):
    """The run's clock moves only when a CPU case runs, by CASE_S (the GPU cases are
    unavailable here: they take no time)."""
    now = [0.0]
    real_run_case = run_command.run_case

    def run_case(case, context):
        now[0] += CASE_S if case.device is DeviceKind.CPU else 0.0
        return real_run_case(case, context)

    monkeypatch.setattr(run_command, "clock", lambda: now[0])
    monkeypatch.setattr(run_command, "run_case", run_case)


def test_max_minutes_leaves_out_what_would_not_fit_and_lists_it(capsys, tmp_path, results_dir, controlled_clock):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    code = main(["run", "--suite", str(grid), "--results", str(results_dir), "--filter", "device=cpu",
                 "--max-minutes", "1"])
    out = capsys.readouterr().out
    assert code == 0
    # The first case fits (estimate < 60 s); it then took 50 s, so the next ones' estimates,
    # scaled by that, no longer fit in the 10 s left.
    records = ResultsStore(results_dir).load()
    assert [r.case.param_dict["m"] for r in records] == [8] and records[0].status is Status.OK
    left_line = next(line for line in out.splitlines() if line.startswith("left out by --max-minutes"))
    assert left_line.startswith("left out by --max-minutes: 2 cases: ")
    assert "m=16" in left_line and "m=24" in left_line
    assert "1 ok, 0 unavailable, 0 failed" in out
    (summary_path,) = (results_dir / "parbench" / "runs").glob("*.json")
    summary = json.loads(summary_path.read_text())
    assert summary["max_minutes"] == 1 and summary["counts"] == {"ok": 1, "unavailable": 0, "failed": 0}
    assert [case_id.endswith(f"m={m},n=8") for case_id, m in zip(summary["left_out"], (16, 24))] == [True, True]


def test_max_minutes_still_records_cases_that_cost_nothing(capsys, tmp_path, results_dir, controlled_clock):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["run", "--suite", str(grid), "--results", str(results_dir), "--max-minutes", "1"]) == 0
    statuses = sorted(str(r.status) for r in ResultsStore(results_dir).load())
    # m=8 on the CPU, and the three GPU cases, unavailable here, estimated at nothing
    assert statuses == ["ok", "unavailable", "unavailable", "unavailable"]


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_max_minutes_that_is_no_positive_number_is_one_line(capsys, results_dir, value):
    assert main(["run", "--results", str(results_dir), "--max-minutes", value]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("parbench: error: --max-minutes must be a positive number")
    assert not results_dir.exists()
