"""Where a measurement came from: machine, software, code version. Captured once per run."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from suites.cases.vocabulary import Framework
from suites.kept.devices import cpu_model, descriptor

#: Distributions every record names the version of, besides each framework's own.
LIBRARIES = ("parbench", "numpy", "pandas", "matplotlib", "asv", "pytest-benchmark")
MACHINE_LABEL_ENV = "PARBENCH_MACHINE"


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def machine_label(explicit: str | None = None) -> str:
    """The name results are grouped under: --label, else $PARBENCH_MACHINE, else the hostname."""
    return explicit or os.environ.get(MACHINE_LABEL_ENV) or socket.gethostname()


def library_versions() -> dict[str, str]:
    versions = {}
    frameworks = (name for framework in Framework for name in descriptor(framework).distributions)
    for name in (LIBRARIES[0], *frameworks, *LIBRARIES[1:]):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parents[2]  # the checkout holding suites/
    try:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_state() -> dict[str, Any]:
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


def nvidia_smi() -> list[dict[str, str]]:
    """GPU model, memory and driver from nvidia-smi, without importing a framework."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    return gpus


def threads_in_use() -> dict[str, int]:
    """Intra-op threads of the frameworks loaded in this process (not imported for the asking)."""
    threads = {}
    for framework in Framework:
        module = descriptor(framework).loaded()
        if module is not None:
            threads[str(framework)] = descriptor(framework).threads_in_use(module)
    return threads


def environment(label: str | None = None) -> dict[str, Any]:
    return {
        "machine": machine_label(label),
        "hostname": socket.gethostname(),
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(),
                "usable_cores": len(os.sched_getaffinity(0))},
        "memory_gib": _memory_gib(),
        "gpus": nvidia_smi(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "python": platform.python_version(),
        "os": platform.platform(),
        "libraries": library_versions(),
        "git": git_state(),
    }
