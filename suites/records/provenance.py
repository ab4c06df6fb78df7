"""Where a measurement came from: machine, software, code version. Captured once per run."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from suites import knobs
from suites.cases.vocabulary import DeviceKind, Framework
from suites.hardware.devices import cpu_last_level_cache_bytes, cpu_model, descriptor, discovered
from suites.records.environment_schema import Environment, Git

#: Distributions every record names the version of, besides each framework's own.
LIBRARIES = ("parbench", "numpy", "pandas", "matplotlib", "asv", "pytest-benchmark")
MACHINE_LABEL_ENV = "PARBENCH_MACHINE"


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def machine_label(explicit: str | None = None) -> str:
    """The name results are grouped under: --label, else $PARBENCH_MACHINE, else the hostname."""
    return explicit or knobs.read(MACHINE_LABEL_ENV) or socket.gethostname()


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


def git_state() -> Git:
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


#: What every record stores of each GPU, as nvidia-smi names it (`nvidia-smi --help-query-gpu`):
#: the record's key, the query field, and how to read its value (units are dropped by `nounits`).
GPU_FIELDS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("index", "index", int),
    ("name", "name", str),
    ("memory", "memory.total", lambda mib: f"{mib} MiB"),
    ("driver", "driver_version", str),
    ("compute_capability", "compute_cap", str),
    ("sm_clock_max_mhz", "clocks.max.sm", int),
    ("mem_clock_max_mhz", "clocks.max.memory", int),
    ("power_limit_w", "power.limit", float),
    # "Enabled" / "Disabled"; None on a GPU without MIG. A MIG slice has a fraction of the GPU.
    ("mig_mode", "mig.mode.current", str),
    # The board's identity: the report takes records with the same UUIDs as one machine across
    # labels and runs (issue 46); "GPU-" then 8-4-4-4-12 hex digits, as nvidia-smi prints it.
    ("uuid", "uuid", str),
)
#: What an nvidia-smi too old for the other fields (compute_cap came with driver 510) still answers.
BASIC_GPU_FIELDS = ("name", "memory", "driver")
#: What nvidia-smi prints for a value the GPU does not have or report.
_NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _nvidia_smi_output(*args: str) -> str | None:
    """nvidia-smi's stdout, or None where it is missing, fails or hangs."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _gpu_rows(fields: tuple[tuple[str, str, Callable[[str], Any]], ...]) -> list[dict[str, Any]] | None:
    out = _nvidia_smi_output(f"--query-gpu={','.join(query for _, query, _ in fields)}",
                             "--format=csv,noheader,nounits")
    if out is None:
        return None
    gpus = []
    for line in out.strip().splitlines():
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            continue
        gpu: dict[str, Any] = {}
        for (key, _, read), value in zip(fields, values):
            try:
                gpu[key] = None if value in _NOT_AVAILABLE else read(value)
            except ValueError:
                gpu[key] = value
        gpus.append(gpu)
    return gpus


def nvidia_smi_listed() -> list[str]:
    """The GPUs `nvidia-smi -L` lists ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)"): what the
    driver sees, whether or not a framework can use it. Empty without nvidia-smi."""
    out = _nvidia_smi_output("-L") or ""
    return [line.strip() for line in out.splitlines() if re.match(r"\s*GPU \d+:", line)]


def nvidia_smi() -> list[dict[str, Any]]:
    """Each GPU's model, memory, driver, compute capability, maximum SM and memory clocks,
    power limit and MIG mode, from nvidia-smi, without importing a framework. An older
    nvidia-smi that rejects a field still gives the basic ones."""
    gpus = _gpu_rows(GPU_FIELDS)
    if gpus is None:
        gpus = _gpu_rows(tuple(field for field in GPU_FIELDS if field[0] in BASIC_GPU_FIELDS))
    return gpus or []


def gpu_topology() -> dict[str, Any] | None:
    """How the GPUs are linked (`nvidia-smi topo -m`): NVLink ("NV<n>": n links) or a PCIe path
    (PIX, PXB, PHB, NODE, SYS), which bounds all-reduce bus bandwidth. `links[a][b]` is the
    link from GPU a to GPU b; `text` is the whole matrix and its legend. None without nvidia-smi."""
    out = _nvidia_smi_output("topo", "-m")
    if out is None:
        return None
    text = _ANSI_ESCAPE.sub("", out).rstrip()
    lines = [line.split("\t") for line in text.splitlines()]
    header = next(([cell.strip() for cell in cells] for cells in lines
                   if cells and not cells[0].strip() and any(c.strip().startswith("GPU") for c in cells)), [])
    columns = [(index, name) for index, name in enumerate(header) if re.fullmatch(r"GPU\d+", name)]
    links: dict[str, dict[str, str]] = {}
    for cells in lines:
        row = cells[0].strip() if cells else ""
        if re.fullmatch(r"GPU\d+", row):
            links[row] = {name: cells[index].strip() for index, name in columns
                          if index < len(cells) and name != row}
    return {"links": links, "text": text}


#: Distributions of the CUDA libraries (pip wheels that torch and tensorflow[and-cuda] install):
#: their versions are what the frameworks load, read here without importing a framework.
#: CUDA 12 wheels carry a -cu12 suffix; CUDA 13's runtime and cuBLAS dropped it.
CUDA_DISTRIBUTIONS = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13",
                      "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-cublas-cu12", "nvidia-cublas")


def cuda_library_versions() -> dict[str, str]:
    versions = {}
    for name in CUDA_DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def discovered_accelerators() -> dict[str, dict[str, Any]]:
    """What each framework found of GPUs and TPUs in this process — the CUDA runtime and cuDNN
    its build uses, NCCL, compute capability, L2 sizes, or why it found none — for the
    frameworks and kinds this process has already asked about (a run asks when it checks a
    GPU or TPU case's availability). Never imports a framework or probes a device, so it
    costs a CPU run nothing."""
    found = {}
    for framework in Framework:
        for kind in (DeviceKind.GPU, DeviceKind.TPU):
            info = discovered(framework, kind)
            if info is not None:
                found[f"{framework}/{kind}"] = {"count": info.count, "names": list(info.names),
                                                "reason": info.reason, **info.details}
    return found


def threads_in_use() -> dict[str, int]:
    """Intra-op threads of the frameworks loaded in this process (not imported for the asking)."""
    threads = {}
    for framework in Framework:
        module = descriptor(framework).loaded()
        if module is not None:
            threads[str(framework)] = descriptor(framework).threads_in_use(module)
    return threads


def environment(label: str | None = None) -> Environment:
    """The run's provenance: every key of `Environment` but those the run adds to each record
    (`suites.records.environment_schema.ADDED_PER_RECORD`)."""
    return {
        "machine": machine_label(label),
        "hostname": socket.gethostname(),
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(),
                "usable_cores": len(os.sched_getaffinity(0)), "llc_bytes": cpu_last_level_cache_bytes()},
        "memory_gib": _memory_gib(),
        "gpus": nvidia_smi(),
        "gpu_topology": gpu_topology(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        # NVIDIA_TF32_OVERRIDE=0 turns TF32 off in cuBLAS/cuDNN under every framework's setting.
        "nvidia_tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
        "cuda_libraries": cuda_library_versions(),
        "accelerators": discovered_accelerators(),
        "python": platform.python_version(),
        "os": platform.platform(),
        "libraries": library_versions(),
        "git": git_state(),
    }
