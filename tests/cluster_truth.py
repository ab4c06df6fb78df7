"""A 2 x 8-GPU Slurm run as the parent process sees it, on a CPU: GPU discovery faked to 8 H100
a node (visible set, UUIDs, memory) and an allocation of two nodes, so that the decisions the
parent takes (availability, backend, `emulated`, the devices a figure is divided by, the srun
command line) are exactly those of the real run (issue 48)."""
from __future__ import annotations

import pytest

from suites.cases.vocabulary import DeviceKind, Framework
from suites.hardware.devices import DeviceInfo
from suites.runner.slurm import Allocation

H100 = "NVIDIA H100 80GB HBM3"
GPUS_PER_NODE = 8
H100_MEMORY = 85_045_395_456
#: The allocation `salloc -N 2 --gpus-per-node=8` gives: two nodes, their addresses, 8 GPUs each.
TWO_BY_EIGHT = Allocation("4711", ("gpu-a", "gpu-b"), ("10.1.0.1", "10.1.0.2"), GPUS_PER_NODE)


def uuids(node: int = 0, count: int = GPUS_PER_NODE) -> list[str]:
    return [f"GPU-{node:04x}{index:04x}-0000-0000-0000-000000000000" for index in range(count)]


def eight_h100(framework: Framework, kind: DeviceKind) -> DeviceInfo:
    """What discovery on one node of the allocation reports: 8 H100 (no TPU, one CPU)."""
    if kind is DeviceKind.GPU:
        return DeviceInfo(framework, kind, GPUS_PER_NODE, (H100,) * GPUS_PER_NODE,
                          details={"compute_capability": ["9.0"] * GPUS_PER_NODE,
                                   "memory_bytes": [H100_MEMORY] * GPUS_PER_NODE, "uuids": uuids()})
    if kind is DeviceKind.CPU:
        return DeviceInfo(framework, kind, 1, ("cpu",))
    return DeviceInfo(framework, kind, 0, reason="no TPU runtime")


#: Every module that asks discovery at the parent's decisions.
DISCOVERY_USERS = ("suites.hardware.devices", "suites.runner.availability", "suites.records.metrics",
                   "suites.runner.nodes")


@pytest.fixture
def eight_gpus_a_node(fresh_discovery, monkeypatch):
    """Discovery everywhere sees the node's 8 H100; Slurm's node environment says 8 GPUs."""
    for where in DISCOVERY_USERS:
        monkeypatch.setattr(f"{where}.discover", eight_h100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(GPUS_PER_NODE))))
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    return TWO_BY_EIGHT
