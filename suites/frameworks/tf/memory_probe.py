"""Peak memory of a TF case: the allocator's statistics per GPU or TPU core, or on the CPU the
process's resident set (`suites.measure.memory_probes.ResidentMemoryProbe`).

`tf.config.experimental.reset_memory_stats(device)` at `start`, `get_memory_info(device)["peak"]`
(bytes in use by tensors) at `stop`; both are documented for GPUs and TPUs ("TPU:0"). TensorFlow
has no figure of what its allocator reserved from the driver (torch's `max_memory_reserved`), so
`reserved_bytes` stays None; and TF's `get_memory_info` does not support CPU devices, hence the
resident set there. Where a TPU's statistics cannot be read, its peak is unknown and the case
says why (`TfTpuMemoryProbe`): the host's resident set is not the TPU's memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.records.peak_memory import MemoryPeak
from suites.measure.memory_probes import MemoryProbe, ResidentMemoryProbe, baseline_rss_bytes


def _name(device: str) -> str:
    """'/GPU:1' -> 'GPU:1', the form `get_memory_info` takes."""
    return device.lstrip("/")


def _index(device: str) -> int:
    return int(device.rsplit(":", 1)[1])


#: What reading a device's memory statistics raises where TF keeps none for it: ValueError
#: (documented: no such device, or statistics not tracked), an op error from the runtime, a
#: reply without a "peak".
STATISTICS_ERRORS = (ValueError, KeyError, TypeError, RuntimeError, tf.errors.OpError)


@dataclass(frozen=True)
class Baseline:
    """What the process held when setup began: its resident set, and bytes in use on each GPU and
    TPU core (a TPU core whose statistics cannot be read has none)."""

    rss_bytes: int | None
    gpu_bytes: dict[str, int] = field(default_factory=dict)
    tpu_bytes: dict[str, int] = field(default_factory=dict)

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

    def with_tpus(self, devices: list[str]) -> "Baseline":
        """Bytes in use now on each of `devices` ('/TPU:0', ...) whose statistics can be read."""
        found = {}
        for device in devices:
            try:
                found[device] = int(tf.config.experimental.get_memory_info(_name(device))["current"])
            except STATISTICS_ERRORS:
                continue
        return replace(self, tpu_bytes=found)


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


class TfTpuMemoryProbe(MemoryProbe):
    """Each TPU core's own peak of bytes in use (kind "tpu"), one per core the case used. Where
    TF cannot reset or read a core's statistics (a runtime that keeps none, a TPU on another
    host), the peak is unknown: no peak, and `details["memory_not_measured"]` says why."""

    def __init__(self, devices: list[str], baseline: Baseline, details: dict[str, Any]) -> None:
        self.devices, self.baseline, self.details = devices, baseline, details
        self.failure: str | None = None

    def start(self) -> None:
        self.failure = None
        for device in self.devices:
            try:
                tf.config.experimental.reset_memory_stats(_name(device))
            except STATISTICS_ERRORS as error:
                self.failure = f"reset_memory_stats({_name(device)!r}) raised {_described(error)}"
                return

    def stop(self) -> list[MemoryPeak]:
        peaks = []
        for device in self.devices if self.failure is None else ():
            try:
                peak = int(tf.config.experimental.get_memory_info(_name(device))["peak"])
            except STATISTICS_ERRORS as error:
                self.failure = f"get_memory_info({_name(device)!r}) raised {_described(error)}"
                break
            peaks.append(MemoryPeak("tpu", _index(device), peak, None, self.baseline.tpu_bytes.get(device)))
        if self.failure is None:
            return peaks
        self.details["memory_not_measured"] = (
            f"TensorFlow reads no memory statistics of this TPU ({self.failure}): its peak is unknown "
            "(the host's resident set is not the TPU's memory)")
        return []


def _described(error: BaseException) -> str:
    """'ValueError: <the message's first line>' (cut at 200 characters)."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:200]}" if text else type(error).__name__


def memory_probe(devices: list[str], baseline: Baseline, details: dict[str, Any] | None = None) -> MemoryProbe:
    """TPU statistics where the case's devices are TPU cores (`details`: where to say why they
    could not be read), GPU statistics where they are GPUs, else this process's resident set."""
    tpus = [device for device in devices if "TPU" in device.upper()]
    if tpus:
        return TfTpuMemoryProbe(tpus, baseline, {} if details is None else details)
    gpus = [device for device in devices if "GPU" in device.upper()]
    return TfGpuMemoryProbe(gpus, baseline) if gpus else ResidentMemoryProbe(baseline.rss_bytes)
