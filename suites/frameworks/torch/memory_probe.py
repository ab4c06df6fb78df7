"""Peak memory of a torch case: the CUDA caching allocator's statistics per GPU, or on the CPU the
process's resident set (`suites.measure.memory_probes.ResidentMemoryProbe`).

`torch.cuda.reset_peak_memory_stats` at `start`, `max_memory_allocated` (bytes held by tensors)
and `max_memory_reserved` (bytes the caching allocator held from the driver: what the device
must have room for) at `stop`. Neither counts the CUDA context or NCCL's buffers: what the device
holds beyond the allocator when the steps end (`outside_allocator_bytes`) is read beside them.
"""
from __future__ import annotations

import gc

from dataclasses import dataclass, field
from typing import Iterable

import torch

from suites.records.peak_memory import MemoryPeak
from suites.measure.memory_probes import MemoryProbe, ResidentMemoryProbe, baseline_rss_bytes


@dataclass(frozen=True)
class Baseline:
    """What the process held when setup began: its resident set, and bytes allocated on each GPU
    the allocator had started on (an in-process case after others may find some still held)."""

    rss_bytes: int | None
    allocated_bytes: dict[int, int] = field(default_factory=dict)

    @classmethod
    def now(cls) -> "Baseline":
        allocated = {}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            allocated = {index: torch.cuda.memory_allocated(index) for index in range(torch.cuda.device_count())}
        return cls(baseline_rss_bytes(), allocated)


class CudaMemoryProbe(MemoryProbe):
    def __init__(self, devices: Iterable[torch.device], baseline: Baseline) -> None:
        self.devices = [torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
                        for device in devices if device.type == "cuda"]
        self.baseline = baseline

    def start(self) -> None:
        for device in self.devices:
            torch.cuda.reset_peak_memory_stats(device)

    def release_cached(self) -> None:
        """The caching allocator's free blocks back to the driver (issue 32, N8: a bf16 case's
        peak reserved memory included the blocks its fp32 reference check had cached)."""
        gc.collect()  # blocks held only by reference cycles (the check's autograd graphs)
        torch.cuda.empty_cache()

    def stop(self) -> list[MemoryPeak]:
        return [MemoryPeak("gpu", device.index, torch.cuda.max_memory_allocated(device),
                           torch.cuda.max_memory_reserved(device),
                           self.baseline.allocated_bytes.get(device.index, 0),
                           outside_allocator_bytes=outside_allocator_bytes(device))
                for device in self.devices]


def outside_allocator_bytes(device: torch.device) -> int:
    """What `device` holds now beyond torch's caching allocator: the driver's used bytes
    (`mem_get_info`: total - free) less what the allocator reserved. That is the CUDA context,
    NCCL's buffers and cuBLAS/cuDNN workspaces, which `max_memory_reserved` never counts, plus
    whatever other processes on a shared GPU hold; 0 where the two reads straddle a release."""
    free, total = torch.cuda.mem_get_info(device)
    return max(0, total - free - torch.cuda.memory_reserved(device))


def memory_probe(devices: Iterable[torch.device], baseline: Baseline) -> MemoryProbe:
    """GPU statistics where the case's devices are GPUs, else this process's resident set."""
    devices = list(devices)
    if any(device.type == "cuda" for device in devices):
        return CudaMemoryProbe(devices, baseline)
    return ResidentMemoryProbe(baseline.rss_bytes)
