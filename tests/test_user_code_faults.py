"""User code cannot end the run, and every case stops at its limit: a user's model that hangs,
exits (sys.exit, os._exit), segfaults, runs out of memory or forks is stored `failed` with what
happened, the run goes on to the next case, and no process is left behind. A model whose outputs
do not match its targets' shape fails too, rather than training on broadcast targets."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import mark_processes

pytest.importorskip("torch")

PLUGIN = '''
import os, signal, sys, time
import numpy as np
import torch
import suites

class Faulty(torch.nn.Module):
    def __init__(self, fault):
        super().__init__()
        self.fault = fault
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x):
        if self.fault == "hang":
            time.sleep(100000)
        elif self.fault == "sys_exit":
            sys.exit(0)
        elif self.fault == "os_exit":
            os._exit(0)
        elif self.fault == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif self.fault == "oom":
            raise MemoryError("the user's forward asked for too much")
        elif self.fault == "wrong_shape":  # (batch, 5) against (batch, 1) targets
            return self.linear(x).repeat(1, 5)
        elif self.fault == "fork":
            if os.fork() == 0:
                time.sleep(100000)
            os._exit(3)
        return self.linear(x)

def data(batch, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 3)).astype(np.float32)
    return x, x.sum(axis=1, keepdims=True)

for fault in ("hang", "sys_exit", "os_exit", "segfault", "oom", "fork", "wrong_shape", "none"):
    suites.user_model(f"faulty_{fault}", input_shape=(3,), loss="mse", data=data,
                      torch=lambda fault=fault: Faulty(fault))
'''

FAULTS = ("hang", "sys_exit", "os_exit", "segfault", "oom", "fork", "wrong_shape")

#: Every case's limit, start-up included: the hanging model's case waits all of it; the others (a
#: process that imports torch, then fails or times a few steps) take a third of it on busy cores.
CASE_TIMEOUT_S = 15
GRID = """
description = "user models that misbehave, then one that does not"
[timing]
budget_s = 0.3
warmup_s = 0.05
case_timeout_s = {timeout}
contention_retries = 0
[[grid]]
workload = "train_step"
framework = "torch"
device = "cpu"
strategy = "single"
precision = "fp32"
params = {{ model = [{models}], batch = 4 }}
"""


def test_misbehaving_user_models_fail_their_case_and_the_run_goes_on(tmp_path, monkeypatch):
    alive = mark_processes(monkeypatch)
    (tmp_path / "faulty.py").write_text(PLUGIN)
    models = ", ".join(f'"faulty_{fault}"' for fault in (*FAULTS, "none"))
    (tmp_path / "grid.toml").write_text(GRID.format(models=models, timeout=CASE_TIMEOUT_S))
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "suites", "run", "--suite", str(tmp_path / "grid.toml"), "--results", str(results),
         "--label", "box"],
        env={**os.environ, "PARBENCH_PLUGINS": str(tmp_path / "faulty.py"), "PYTHONPATH": str(Path.cwd())},
        capture_output=True, text=True, timeout=400)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    records = {json.loads(line)["case"]["params"]["model"]: json.loads(line)
               for line in (results / "parbench" / "records-box.jsonl").read_text().splitlines()}
    assert set(records) == {f"faulty_{fault}" for fault in (*FAULTS, "none")}, done.stdout[-3000:]
    for fault in FAULTS:
        record = records[f"faulty_{fault}"]
        assert record["status"] == "failed", (fault, record["status"], record["reason"])
        assert record["reason"], fault
    assert f"did not finish within {CASE_TIMEOUT_S} s" in records["faulty_hang"]["reason"]
    assert "faulty.py" in records["faulty_hang"]["reason"]  # where it hung
    assert "MemoryError" in records["faulty_oom"]["reason"]
    assert re.search(r"outputs have shape \(\d+, 5\) but its targets \(\d+, 1\)",
                     records["faulty_wrong_shape"]["reason"])
    assert records["faulty_none"]["status"] == "ok"  # the run went on after all of them
    assert done.returncode == 1  # failed cases: non-zero, but the run finished
    end = time.monotonic() + 15
    while alive() and time.monotonic() < end:
        time.sleep(0.2)
    assert not alive(), f"processes left running (the forked child?): {alive()}"
