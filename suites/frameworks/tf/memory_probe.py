"""Peak memory of a TF case: the GPU allocator's statistics per GPU, or on the CPU the process's
resident set (`suites.run.memory_probes.ResidentMemoryProbe`).

`tf.config.experimental.reset_memory_stats(device)` at `start`, `get_memory_info(device)["peak"]`
(bytes in use by tensors) at `stop`. TensorFlow has no figure of what its allocator reserved
from the driver (torch's `max_memory_reserved`), so `reserved_bytes` stays None; and TF's
`get_memory_info` does not support CPU devices, hence the resident set there.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.records.peak_memory import MemoryPeak
from suites.run.memory_probes import MemoryProbe, ResidentMemoryProbe, baseline_rss_bytes


def _name(device: str) -> str:
    """'/GPU:1' -> 'GPU:1', the form `get_memory_info` takes."""
    return device.lstrip("/")


def _index(device: str) -> int:
    return int(device.rsplit(":", 1)[1])


@dataclass(frozen=True)
class Baseline:
    """What the process held when setup began: its resident set, and bytes in use on each GPU."""

    rss_bytes: int | None
    gpu_bytes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def now(cls) -> "Baseline":
        """The resident set only: reading a GPU's statistics initialises TF, which must wait
        until the case has configured its runtime (`with_gpus`)."""
        return cls(baseline_rss_bytes())

    def with_gpus(self, devices: list[str]) -> "Baseline":
        """Bytes in use now on each of `devices` that is a GPU ('/GPU:0', ...)."""
        gpus = [device for device in devices if "GPU" in device.upper()]
        return replace(self, gpu_bytes={device: tf.config.experimental.get_memory_info(_name(device))["current"]
                                        for device in gpus})


class TfGpuMemoryProbe(MemoryProbe):
    def __init__(self, devices: list[str], baseline: Baseline) -> None:
        self.devices, self.baseline = devices, baseline

    def start(self) -> None:
        for device in self.devices:
            tf.config.experimental.reset_memory_stats(_name(device))

    def stop(self) -> list[MemoryPeak]:
        return [MemoryPeak("gpu", _index(device), tf.config.experimental.get_memory_info(_name(device))["peak"],
                           None, self.baseline.gpu_bytes.get(device, 0))
                for device in self.devices]


def memory_probe(devices: list[str], baseline: Baseline) -> MemoryProbe:
    """GPU statistics where the case's devices are GPUs, else this process's resident set."""
    gpus = [device for device in devices if "GPU" in device.upper()]
    return TfGpuMemoryProbe(gpus, baseline) if gpus else ResidentMemoryProbe(baseline.rss_bytes)
