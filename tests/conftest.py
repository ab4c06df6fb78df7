"""Shared fixtures: fast timing for tests, an isolated results directory, the processes a test
started."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from suites.cases.timing_config import TimingConfig  # noqa: E402
from tests.processes import mark_processes  # noqa: E402

#: Enough to exercise every stage of the timer in a fraction of a second.
FAST = TimingConfig(warmup_s=0.02, min_warmup_steps=2, block_min_s=0.002, min_samples=3,
                    min_time_s=0.01, budget_s=0.2)


@pytest.fixture
def fast_timing() -> TimingConfig:
    return FAST


@pytest.fixture
def results_dir(tmp_path):
    return tmp_path / "results"


@pytest.fixture
def our_processes(monkeypatch):
    """Lists the still-running processes this test started (other tests run workers too)."""
    return mark_processes(monkeypatch)


@pytest.fixture
def tiny_disk(tmp_path) -> Path:
    """A 256 KiB tmpfs, unmounted afterwards: a disk that really fills up (root only; skipped
    where a tmpfs cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def fresh_discovery():
    """Device discovery forgotten before and after the test (it is cached per process), so a test's
    pretended GPUs are discovered anew and leave nothing behind."""
    from suites.hardware import devices

    devices.discover.cache_clear()
    devices._FOUND.clear()
    yield
    devices.discover.cache_clear()
    devices._FOUND.clear()
