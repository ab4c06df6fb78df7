"""SIGTERM and SIGHUP stop a run as cleanly as Ctrl-C: the rank processes of the case in progress
and their groups are gone, the temp folders removed, one line says what was stopped, and the
exit code is the shell's 128 + signal. (Found on a GPU: a step stopped by `timeout` left two DDP
ranks holding 134 GiB of the GPU, and every later step ran out of memory.)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suites.runner.termination import Terminated, signals_raise
from tests.processes import mark_processes, wait_for

LONG_RANKS_GRID = """
description = "two gloo ranks that warm up for minutes: a case to stop"
[timing]
budget_s = 60
warmup_s = 600
[[grid]]
workload = "train_step"
framework = "torch"
device = "cpu"
strategy = "ddp"
precision = "fp32"
n_devices = 2
params = { model = "mlp", batch = 8 }
"""


def _ranks(pids: list[int]) -> list[int]:
    """The rank processes (`suites.runner.case_process`) among `pids`."""
    ranks = []
    for pid in pids:
        try:
            if b"case_process" in Path(f"/proc/{pid}/cmdline").read_bytes():
                ranks.append(pid)
        except OSError:
            continue
    return ranks


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminating_signal_stops_the_ranks_and_removes_the_temp_folders(tmp_path, monkeypatch, sig):
    alive = mark_processes(monkeypatch)
    grid = tmp_path / "long.toml"
    grid.write_text(LONG_RANKS_GRID)
    temp = tmp_path / "tmp"
    temp.mkdir()
    results = tmp_path / "results"
    cli = subprocess.Popen([sys.executable, "-m", "suites", "run", "--suite", str(grid), "--results", str(results)],
                           env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path.cwd())},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(_ranks(alive())) == 2, 120), "the rank processes never started"
        time.sleep(1)  # into their set-up
        cli.send_signal(sig)
        _, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 128 + sig
    assert f"stopped by {signal.Signals(sig).name}" in stderr
    assert "Traceback" not in stderr
    assert wait_for(lambda: not alive(), 20), f"processes left running: {alive()}"
    assert list(temp.iterdir()) == [], "temp folders left behind"


def test_the_signal_raises_once_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as stop:
        with signals_raise():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler runs here
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # a second one while unwinding: ignored
                time.sleep(0.1)
    assert stop.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before
