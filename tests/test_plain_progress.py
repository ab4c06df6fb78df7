"""Off a terminal `parbench run` is not silent (issue 47 item 5): one plain line per case as it
ends (place, elapsed and time left, status, id, figure), a table laid out for 120 columns with
case ids broken only between segments, and what did not run grouped by reason, one line each."""
from __future__ import annotations

import io

from rich.console import Console

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.frontends.cli import main
from suites.frontends.run_progress import PlainLines, figure, plain_line
from suites.frontends.run_table import LOG_WIDTH, case_lines, not_run_lines, print_results
from suites.records.contention import Contention
from suites.records.measurement import Measurement
from suites.records.record import Record
from tests.test_run_bounds import GRID

LONG = Case.make("conv2d", "torch", "cpu", params={"batch": 16, "cin": 64, "cout": 64, "h": 32, "kernel": 3,
                                                    "layout": "nhwc", "w": 32}, compile="inductor")


def record(case: Case, status: Status = Status.OK, reason: str = "", **fields) -> Record:
    return Record(case=case, status=status, run_id="r", timestamp="t", suite="s", environment={"machine": "m"},
                  reason=reason, **fields)


def log() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=LOG_WIDTH, force_terminal=False), out


def test_one_plain_line_per_case_with_place_times_status_and_figure():
    console, out = log()
    lines = PlainLines(console, 12)
    contended = Contention(None, None, None, 2, True, "others took 60% of its 2 cores")
    lines.ended(2, LONG, record(LONG, measurement=Measurement((1e-3,) * 9), metrics={"tflops": 0.25},
                                contention=contended), 42.0, 80.0)
    lines.ended(3, LONG, None, 43.0, 79.0)
    first, second = out.getvalue().splitlines()
    assert first == (f"[ 3/12 42 s, ~1 min 20 s left] ok {LONG.id}: 0.25 TFLOP/s, "
                     f"contended (others took 60% of its 2 cores)")
    assert second == f"[ 4/12 43 s, ~1 min 19 s left] left out (--max-minutes) {LONG.id}"


def test_a_case_that_did_not_run_says_why_on_its_line():
    gone = record(LONG, Status.UNAVAILABLE, "no gpu: this torch build has no GPU support")
    assert figure(gone) == "no gpu: this torch build has no GPU support"
    assert plain_line(1, 1, "x", "unavailable", figure(gone), 0.0, 0.0).endswith("unavailable x: no gpu: this torch "
                                                                                  "build has no GPU support")


def test_case_ids_break_only_between_segments():
    lines = case_lines(LONG.id, 40).splitlines()
    assert "".join(lines) == LONG.id and all(len(line) <= 40 for line in lines)
    assert all(line.endswith(("/", ",")) for line in lines[:-1])
    assert case_lines("matmul/torch/cpu:1/single/fp32/k=8", 56) == "matmul/torch/cpu:1/single/fp32/k=8"


def test_what_did_not_run_is_one_line_per_reason():
    gpu = [record(Case.make("matmul", "torch", "gpu", params={"m": m}), Status.UNAVAILABLE, "no gpu")
           for m in (8, 16, 24)]
    tpu = record(Case.make("matmul", "tf", "tpu", params={"m": 8}), Status.UNAVAILABLE, "no tpu")
    assert not_run_lines([*gpu, tpu]) == ["3 unavailable: no gpu", f"1 unavailable: no tpu ({tpu.case.id})"]


def test_the_log_table_fits_120_columns_and_lists_failures_below():
    console, out = log()
    ok = record(LONG, measurement=Measurement((1e-3,) * 9), metrics={"tflops": 0.25})
    broke = record(Case.make("matmul", "torch", "cpu", params={"m": 8}), Status.FAILED, "device lost during timing")
    gone = record(Case.make("matmul", "torch", "gpu", params={"m": 8}), Status.UNAVAILABLE, "no gpu")
    print_results(console, [ok, broke, gone], "suite s")
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= LOG_WIDTH
    assert f"failed: {broke.case.id}: device lost during timing" in text
    assert "1 unavailable: no gpu" in text and gone.case.id not in text.split("1 unavailable")[0]


def test_a_piped_run_prints_a_line_per_case(tmp_path, capsys, results_dir, monkeypatch):
    """capsys is no terminal: the run's output is what a log gets."""
    from suites.frontends.commands import run as run_command
    from suites.runner.runner import Runner

    monkeypatch.setattr(Runner, "run", lambda runner, planned: record(
        planned.case, Status.OK, measurement=Measurement((1e-3,) * 9), metrics={"tflops": 0.1}))
    monkeypatch.setattr(run_command, "clock", lambda: 0.0)
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["run", "--suite", str(grid), "--results", str(results_dir), "--filter", "device=cpu"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert [line.split("] ")[1].split(" ")[0] for line in lines] == ["ok", "ok", "ok"]
    assert lines[0].startswith("[1/3 0 s, ~") and lines[0].endswith(": 0.1 TFLOP/s")
