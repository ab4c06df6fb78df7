"""Peak memory of a case over its timed steps: one figure per device (GPU, TPU core) or rank
process (CPU).

What a peak is depends on the device, and the record says which (`kind`):
- ``gpu``: the framework allocator's peak of bytes held by tensors on that GPU (torch
  `max_memory_allocated`, TF `get_memory_info(device)["peak"]`); `reserved_bytes` is torch's
  peak of what its caching allocator held from the driver (`max_memory_reserved`), which is
  what the device must have room for. TensorFlow reports no such figure (None). Neither counts
  the CUDA context. `outside_allocator_bytes` (torch GPUs) is what the device held beyond torch's
  allocator when the timed steps ended: `torch.cuda.mem_get_info`'s used (total - free) less
  `torch.cuda.memory_reserved`, i.e. the CUDA context, NCCL's buffers and cuBLAS/cuDNN workspaces
  (and, on a GPU that ranks or other processes share, what they held).
- ``tpu``: TF's `get_memory_info("TPU:i")["peak"]`, bytes held by tensors in that TPU core's
  memory (HBM); no reserved figure. Where TF cannot read it the case has no TPU peak (and says
  why in its details' `memory_not_measured`): the host's resident set is never reported for it.
- ``cpu``: the rank process's peak resident set (RSS): framework runtime, model, optimizer state,
  batches and activations together. `baseline_bytes` is its RSS at the start of the case's setup,
  before the model was built, so `peak - baseline` is what the training state took beyond the
  runtime.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal

MemoryKind = Literal["gpu", "cpu", "tpu"]


@dataclass(frozen=True)
class MemoryPeak:
    #: "gpu" / "tpu": one GPU's or TPU core's allocator statistics; "cpu": one process's resident set.
    kind: MemoryKind
    #: GPU, TPU: the device's ordinal in its process (cuda:N, /GPU:N, /TPU:N); CPU: 0.
    device: int
    peak_bytes: int
    #: torch GPUs: peak bytes its caching allocator reserved; None elsewhere.
    reserved_bytes: int | None = None
    #: What the device (GPU, TPU: allocated) or process (CPU: resident) held when setup began.
    baseline_bytes: int | None = None
    #: The rank process that measured it (0 in a single-process case).
    rank: int = 0
    #: torch GPUs: bytes the device held outside torch's allocator after the timed steps (the CUDA
    #: context, NCCL's buffers, library workspaces); None elsewhere and in older records.
    outside_allocator_bytes: int | None = None

    @property
    def label(self) -> str:
        """e.g. 'rank 1 gpu:0'."""
        return f"rank {self.rank} {self.kind}:{self.device}"

    @property
    def training_state_bytes(self) -> int | None:
        """What the case added to the device or process beyond its baseline."""
        return None if self.baseline_bytes is None else self.peak_bytes - self.baseline_bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MemoryPeak":
        return cls(kind=data["kind"], device=int(data["device"]), peak_bytes=int(data["peak_bytes"]),
                   reserved_bytes=_int_or_none(data.get("reserved_bytes")),
                   baseline_bytes=_int_or_none(data.get("baseline_bytes")), rank=int(data.get("rank", 0)),
                   outside_allocator_bytes=_int_or_none(data.get("outside_allocator_bytes")))


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def largest_peak(peaks: Iterable[MemoryPeak]) -> int | None:
    """The largest peak of one device or rank process: what each device must hold."""
    return max((peak.peak_bytes for peak in peaks), default=None)


def largest_reserved(peaks: Iterable[MemoryPeak]) -> int | None:
    return max((peak.reserved_bytes for peak in peaks if peak.reserved_bytes is not None), default=None)


def largest_training_state(peaks: Iterable[MemoryPeak]) -> int | None:
    states = [peak.training_state_bytes for peak in peaks if peak.training_state_bytes is not None]
    return max(states, default=None)


def total_peak(peaks: Iterable[MemoryPeak]) -> int | None:
    """The sum of the peaks: an upper bound of what the devices or processes held together (their
    peaks need not coincide), and what one host's RAM must hold for ranks that share it."""
    values = [peak.peak_bytes for peak in peaks]
    return sum(values) if values else None
