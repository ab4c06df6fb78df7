"""The GPU check script (tests/gpu/check.sh) keeps working between the rare times a GPU is lent: its
CPU dry run runs every default step within the window's budget and leaves each step's files in $OUT
as the step ends; its longer steps still expand their filters; a SIGTERM ends the running step's
whole process group."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).parent / "gpu" / "check.sh"
#: The default steps and their limits, which the 300 s budget is cut into (the script's header says so).
DEFAULT_LIMITS = {"preflight": 5, "versions": 15, "ddp_torchrun": 30, "parity": 60, "ready": 180, "records": 10}
LONGER_STEPS = ("gemm_power", "standard_single", "shared_gpu")


def records_in(out: Path) -> list[dict]:
    return [json.loads(line) for path in (out / "records").rglob("*.jsonl")
            for line in path.read_text().splitlines() if line.strip()]


def test_the_default_steps_fit_the_300_s_budget_and_the_script_says_so():
    text = SCRIPT.read_text()
    assert "BUDGET_S=${CHECK_BUDGET_S:-300}" in text and sum(DEFAULT_LIMITS.values()) == 300
    for name, limit in DEFAULT_LIMITS.items():
        assert re.search(rf"^step {name} (\"\$\(.*echo {limit}\)\"|{limit}) ", text, re.MULTILINE), name
    assert f'STEPS=${{CHECK_STEPS:-"{" ".join(DEFAULT_LIMITS)}"}}' in text


def test_the_dry_run_runs_every_default_step_and_leaves_its_files_in_out(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], env={**os.environ, "OUT": str(out)},
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    for step in DEFAULT_LIMITS:
        assert f"{step}: ok" in summary, summary
        assert (out / "logs" / f"{step}.log").is_file()
    preflight = (out / "logs" / "preflight.log").read_text()
    assert "python3: /" in preflight and re.search(r"commit: [0-9a-f]{40}", preflight)
    assert "parbench / canonical = " in summary  # parity ok only where something was compared
    (ddp,) = [record for record in records_in(out) if record["case"]["strategy"] == "ddp"]
    assert ddp["status"] == "ok" and ddp["details"]["launcher"] == "torchrun"
    assert f"{ddp['case']['id']} | ok | " in summary  # the records step: one line a record
    # on a CPU `parbench ready` has nothing to check, and writes no readiness.json (on a GPU: $OUT/readiness.json)
    assert "nothing to check" in (out / "logs" / "ready.log").read_text() and "--out " + str(out) in summary


def test_the_longer_steps_still_expand_their_gpu_cases(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "CHECK_STEPS": " ".join(LONGER_STEPS), "CHECK_SHARED_PARTS": "resnet50"}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = records_in(out)
    ids = {record["case"]["id"] for record in records}
    assert all(record["status"] == "unavailable" and record["reason"] for record in records)
    assert any("resnet50" in case and "/gpu:1/" in case for case in ids)
    assert any("/gpu:2/fsdp/" in case and "resnet50" in case for case in ids)


def test_a_step_past_the_budget_is_skipped_and_says_so(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "CHECK_BUDGET_S": "5", "CHECK_STEPS": "versions"}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "versions: skipped (budget of 5 s spent)" in (out / "summary.txt").read_text()


def test_sigterm_ends_the_running_steps_process_group_and_keeps_its_log(tmp_path, our_processes):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "CHECK_STEPS": "versions"}
    script = subprocess.Popen(["bash", str(SCRIPT), "--dry-run"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    log = out / "logs" / "versions.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().startswith("== versions")) and time.monotonic() < deadline:
        time.sleep(0.05)
    script.send_signal(signal.SIGTERM)
    assert script.wait(timeout=30) == 143
    assert "versions: stopped by a signal" in (out / "summary.txt").read_text()
    assert log.read_text().startswith("== versions")
    assert our_processes() == []
