"""Issue 48, 9d: a GPU rank is pinned to its GPU's NUMA node (NVML's `nvmlDeviceGetCpuAffinity`),
unless someone chose its CPUs already, and its record says what was done and why. On a fake
two-socket node of 8 GPUs: CPUs 0-111 on socket 0 near GPUs 0-3, 112-223 on socket 1 near GPUs 4-7."""
from __future__ import annotations

import pytest

from suites.measure import gpu_cpu_affinity
from suites.measure.process_env import CPUS_ENV
from suites.runner import spanning

NODE_CPUS = 224
SOCKET = {0: set(range(0, 112)), 1: set(range(112, 224))}


def mask(cpus: set[int]) -> list[int]:
    """NVML's CPU set of `cpus`: 64-bit words, CPU 64 j + i at bit i of word j."""
    words = [0] * -(-NODE_CPUS // 64)
    for cpu in cpus:
        words[cpu // 64] |= 1 << cpu % 64
    return words


class FakeNvml:
    """pynvml's calls the pinning makes, for 8 GPUs numbered as CUDA numbers them."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetCpuAffinity(self, handle: int, words: int) -> list[int]:
        self.asked.append((handle, words))
        return mask(SOCKET[handle // 4])


@pytest.fixture
def node(monkeypatch):
    """This process on the fake node, on every CPU and not yet pinned; `pinned` collects what it was
    pinned to."""
    pinned: list[set[int]] = []
    monkeypatch.setattr(gpu_cpu_affinity, "_decided", None)
    monkeypatch.setattr(gpu_cpu_affinity.os, "sched_getaffinity", lambda pid: set(range(NODE_CPUS)))
    monkeypatch.setattr(gpu_cpu_affinity.os, "sched_setaffinity", lambda pid, cpus: pinned.append(set(cpus)))
    monkeypatch.setattr(gpu_cpu_affinity.os, "cpu_count", lambda: NODE_CPUS)
    monkeypatch.setattr("suites.hardware.devices.cuda_device_uuids", lambda: None)  # CUDA_VISIBLE_DEVICES decides
    return pinned


def test_a_gpu_rank_on_every_cpu_is_pinned_to_its_gpus_numa_node_and_its_record_says_so(node, monkeypatch):
    nvml = FakeNvml()
    decided = gpu_cpu_affinity.pin_near_gpu(5, lambda: nvml, environ={})
    assert nvml.asked == [(5, 4)]  # 224 CPUs: a set of four 64-bit words
    assert node == [SOCKET[1]]
    assert decided.action == "pinned" and (decided.cpus_before, decided.cpus_after, decided.gpu_numa_cpus) == (
        224, 112, 112)
    # once a process: a second group finds the affinity narrowed by itself, not by a user
    assert gpu_cpu_affinity.pin_near_gpu(5, lambda: nvml, environ={}) is decided and len(node) == 1

    monkeypatch.setenv(spanning.SLURM_NODE_ENV, "gpu-a")
    monkeypatch.setattr(spanning, "gpu_uuid_of_this_rank", lambda: "GPU-5")
    entry = {**spanning.node_provenance(on_gpu=True), "rank": 5}
    (rank,) = spanning.nodes_details([entry], "slurm")["ranks"]
    assert rank["cpu_pinning"] == decided.to_dict() and rank["gpu_uuid"] == "GPU-5"


@pytest.mark.parametrize("environ, affinity, why", [
    ({"SLURM_CPU_BIND_TYPE": "mask_cpu:"}, set(range(NODE_CPUS)), "Slurm bound it"),
    ({CPUS_ENV: "0-7"}, set(range(NODE_CPUS)), "parbench pinned it"),
    ({}, set(range(112, 140)), "28 of the node's 224 CPUs"),
])
def test_cpus_someone_chose_are_kept_with_the_reason(node, monkeypatch, environ, affinity, why):
    monkeypatch.setattr(gpu_cpu_affinity.os, "sched_getaffinity", lambda pid: affinity)
    decided = gpu_cpu_affinity.pin_near_gpu(1, FakeNvml, environ=environ)
    assert node == [] and decided.action == "kept" and why in decided.reason


def test_slurms_cpu_bind_none_is_nobodys_choice(node):
    decided = gpu_cpu_affinity.pin_near_gpu(0, FakeNvml, environ={"SLURM_CPU_BIND_TYPE": "none,"})
    assert decided.action == "pinned" and node == [SOCKET[0]]


def test_without_pynvml_nothing_is_pinned_and_the_record_says_why(node):
    def missing():
        raise ImportError("No module named 'pynvml'")

    decided = gpu_cpu_affinity.pin_near_gpu(0, missing, environ={})
    assert node == [] and decided.action == "skipped" and "nvidia-ml-py" in decided.reason
    assert gpu_cpu_affinity.decision() == decided.to_dict()


def test_a_rank_starting_its_gpu_work_pins_near_that_gpu(monkeypatch):
    """Where a torch rank takes its GPU (`ProcessGroup`), before NCCL starts its threads."""
    torch = pytest.importorskip("torch")
    from suites.frameworks.torch import distributed

    calls = []
    rank = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "5", "MASTER_ADDR": "x", "MASTER_PORT": "1"}
    for name, value in rank.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(distributed, "rank_device", lambda case, local: torch.device("cuda", local))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device.index)))
    monkeypatch.setattr(distributed, "pin_near_gpu", lambda ordinal: calls.append(("pin", ordinal)))
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda *args, **kwargs: calls.append(("init",)))
    distributed.ProcessGroup(None, "nccl")
    assert calls == [("set_device", 5), ("pin", 5), ("init",)]
