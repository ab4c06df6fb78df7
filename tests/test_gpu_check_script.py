"""The GPU check script (tests/gpu/check.sh) keeps working between the rare times a GPU is lent: its
CPU dry run expands every step's filters and commands, and comes back with the files the GPU run
brings back."""
from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).parent / "gpu" / "check.sh"
STEPS = ("versions", "ready", "parity", "gemm_power", "compile_pairs", "standard_single", "shared_gpu",
         "parity_precisions", "pytest_gpu")


def test_the_dry_run_runs_every_step_and_brings_back_the_records(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], env={**os.environ, "OUT": str(out)},
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    for step in STEPS:
        assert f"{step}: ok" in summary, summary
    with tarfile.open(out / "records.tgz") as archive:
        records = [json.loads(line)
                   for member in archive.getmembers() if member.name.endswith(".jsonl")
                   for line in archive.extractfile(member).read().decode().splitlines() if line.strip()]
        logs = {Path(member.name).name for member in archive.getmembers()}
    # every GPU case the steps select is stored, unavailable here with its reason, none dropped
    ids = {record["case"]["id"] for record in records}
    assert len(ids) >= 20
    assert all(record["status"] == "unavailable" and record["reason"] for record in records)
    assert any("resnet50" in case and "/gpu:1/" in case for case in ids)
    assert any("/gpu:2/fsdp/" in case and "resnet50" in case for case in ids)
    with tarfile.open(out / "logs.tgz") as archive:
        logs = {Path(member.name).name for member in archive.getmembers()}
    assert {f"{step}.log" for step in STEPS} <= logs


def test_a_step_past_the_budget_is_skipped_and_says_so(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "CHECK_BUDGET_S": "10", "CHECK_STEPS": "versions"}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "versions: skipped (budget of 10 s spent)" in (out / "summary.txt").read_text()
