"""The CLI end to end: bad input gets one clear line and a non-zero exit; runs store records."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from suites.cases.vocabulary import Status
from suites.frontends.cli import main
from suites.records.store import ResultsStore

TINY = """
description = "tiny"
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
params = { m = 32, n = 32, k = 32 }
"""


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("parbench: error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def tiny_grid(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return str(path)


def test_run_stores_records_and_reports_missing_gpu_with_reason(capsys, tiny_grid, results_dir):
    code, out, _ = run_cli(capsys, "run", "--suite", tiny_grid, "--results", str(results_dir), "--label", "ci-box")
    assert code == 0
    records = ResultsStore(results_dir).load()
    by_device = {str(r.case.device): r for r in records}
    assert by_device["cpu"].status is Status.OK and by_device["cpu"].check.passed
    assert by_device["gpu"].status is Status.UNAVAILABLE
    assert "no gpu:" in by_device["gpu"].reason and "CUDA" in by_device["gpu"].reason
    env = by_device["cpu"].environment
    assert env["machine"] == "ci-box" and env["libraries"]["torch"] and env["git"]["commit"]
    assert "1 ok, 1 unavailable, 0 failed" in out


def test_gpu_hidden_by_cuda_visible_devices_is_named(capsys, tiny_grid, results_dir, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    from suites.hardware import devices
    devices.discover.cache_clear()
    try:
        run_cli(capsys, "run", "--suite", tiny_grid, "--results", str(results_dir), "--filter", "device=gpu")
    finally:
        devices.discover.cache_clear()
    (record,) = ResultsStore(results_dir).load()
    assert "CUDA_VISIBLE_DEVICES" in record.reason


def test_filter_that_matches_nothing(capsys, tiny_grid, results_dir):
    code, _, err = run_cli(capsys, "run", "--suite", tiny_grid, "--results", str(results_dir),
                           "--filter", "framework=tf")
    assert code == 2
    assert "matches none of the 2 cases" in one_error_line(err)
    assert not results_dir.exists()


def test_results_path_that_cannot_be_created(capsys, tiny_grid, tmp_path):
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    code, _, err = run_cli(capsys, "run", "--suite", tiny_grid, "--results", str(blocker / "results"))
    assert code == 2
    assert "cannot create results directory" in one_error_line(err)


@pytest.mark.parametrize("args, words", [
    (("run", "--suite", "no-such-suite"), "unknown suite"),
    (("list", "--suite", "/nonexistent/grid.toml"), "does not exist"),
    (("run", "--budget", "-1"), "argument --budget: '-1' is not valid"),
])
def test_bad_arguments_are_one_line(capsys, args, words, results_dir):
    code, _, err = run_cli(capsys, *args, *(("--results", str(results_dir)) if args[0] == "run" else ()))
    assert code == 2 and words in one_error_line(err)


def test_malformed_grid_file_is_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\n'
                   'params = { m = 0, n = 1, k = 1 }\n')
    code, _, err = run_cli(capsys, "list", "--suite", str(bad))
    assert code == 2
    assert f"{bad}: grid[0].params.m: must be >= 1" in one_error_line(err)


def test_list_shows_suites_and_cases(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and "quick" in out and "kernels" in out
    code, out, _ = run_cli(capsys, "list", "--suite", "quick", "--filter", "framework=tf conv2d")
    assert out.split() == ["conv2d/tf/cpu:1/single/fp32/batch=16,cin=64,cout=64,h=32,kernel=3,layout=nhwc,w=32",
                           "conv2d/tf/gpu:1/single/fp32/batch=16,cin=64,cout=64,h=32,kernel=3,layout=nhwc,w=32"]


def test_devices_json_names_a_reason_for_every_missing_kind(capsys):
    code, out, _ = run_cli(capsys, "devices", "--json")
    infos = json.loads(out)
    assert code == 0 and len(infos) == 6
    for info in infos:
        assert info["count"] > 0 or info["reason"], info


def test_console_script_and_module_entry_points_work():
    """The console script installed beside this interpreter, so an unactivated venv works too."""
    script = Path(sys.executable).parent / "parbench"
    for command in ([str(script), "list"], [sys.executable, "-m", "suites", "list"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "quick" in result.stdout


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_command_without_a_traceback(capsys, flag):
    with pytest.raises(SystemExit) as exit_:
        main([flag])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0 and err == ""
    assert "% of measured peak" in out  # calibrate's help, whose % argparse would try to format
    for command in ("devices", "list", "run", "calibrate", "report", "compare"):
        assert command in out


def test_a_reader_that_stops_early_gets_no_traceback():
    """`parbench list | head -1`: the closed pipe ends the command quietly."""
    process = subprocess.Popen([sys.executable, "-m", "suites", "list", "--suite", "kernels"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    _, stderr = process.communicate(timeout=120)
    assert b"Traceback" not in stderr and process.returncode == 141
