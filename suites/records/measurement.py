"""A measurement: every raw sample of one case, and statistics computed from them."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from suites.records.contention import CpuUsage, bimodal as two_modes
from suites.records.energy_readings import EnergyMeasurement
from suites.records.memory_breakdown import MemoryBreakdown
from suites.records.peak_memory import (MemoryPeak, largest_peak, largest_reserved, largest_training_state,
                                total_peak)
from suites.records.gpu_telemetry import Telemetry, burst_gain


#: Slowest over fastest rank (compute time, else busy time) above which a straggler is flagged.
STRAGGLER_RATIO = 1.10
#: `stop_reason` of a case whose steps were too slow for timed blocks within its limit: its
#: samples are the warm steps it had time for.
OUT_OF_TIME = "out of time"


@dataclass(frozen=True)
class Measurement:
    #: Seconds per step; each sample is the mean of one block of `block_size` steps.
    samples: tuple[float, ...]
    block_size: int = 1
    warmup_steps: int = 0
    #: Wall time of the very first step, which includes tracing / compilation / autotuning.
    first_step_s: float | None = None
    #: The spread target this measurement was repeated for (IQR / median).
    target_rel_iqr: float = 0.02
    stop_reason: str = ""
    #: Multi-process strategies: each rank's median busy time per step, in rank order — the
    #: part of a block before the rank waits at the barrier for its peers. The samples are
    #: global (barrier to barrier), so a slow rank sets them; here it shows as the largest.
    rank_medians: tuple[float, ...] = field(default=())
    #: Where the strategy can step without its cross-rank exchange (DDP under `no_sync`): each
    #: rank's median time of such a step, in rank order — its own compute, free of its peers.
    rank_compute: tuple[float, ...] = field(default=())
    #: Wall time of the whole timing loop, first block to last, gaps between blocks included.
    timed_s: float | None = None
    #: Training cases: peak memory over the timed steps (a cut-short case: over its warm steps),
    #: one entry per GPU or per rank process on the CPU, every rank's gathered in rank order
    #: (`suites.records.peak_memory.MemoryPeak`: kind, device, peak_bytes, reserved_bytes,
    #: baseline_bytes, rank, outside_allocator_bytes). Empty where the runnable measures none
    #: (kernels, collectives) and in records older than the field.
    memory: tuple[MemoryPeak, ...] = field(default=())
    #: What those peaks are made of (torch training cases): each GPU's or rank process's tensors
    #: by category at their peak in one more, untimed step under the framework's memory tracker
    #: (torch's MemTracker), every rank's in rank order (`suites.records.memory_breakdown`). Empty
    #: where none was taken (a runnable that tracks none: TensorFlow's, a compiled case; the
    #: record's details say why) and in records older than the field.
    memory_breakdown: tuple[MemoryBreakdown, ...] = field(default=())
    #: Energy of the case's devices over the timed blocks (`suites.records.energy_readings`), or why none was
    #: read; None in records older than the field and where the timer read none (asv, pytest).
    energy: EnergyMeasurement | None = None
    #: A compiled case: compilations after the first step's, while warming up (the timed
    #: steps compiled nothing: a case whose did failed). None: not compiled, or an older record.
    recompiles: int | None = None
    #: GPU cases: clocks, power, temperature, utilization (each's min, median and max) and the
    #: NVML clock-event reasons seen over the timed blocks, and the device's kernel time per step
    #: from the profiler (`suites.records.gpu_telemetry`); None where the timer read none (older
    #: records, asv, pytest).
    telemetry: Telemetry | None = None
    #: CPU time over the timed blocks (a cut-short case: its warm steps): the case's own process
    #: tree's and everyone's on its cores (`suites.measure.cpu_meter.CpuMeter`), from which the
    #: record's `contention` is judged (its input); None where unreadable (no /proc) and in
    #: older records.
    cpu: CpuUsage | None = None

    @cached_property
    def median(self) -> float:
        return float(np.median(self.samples))

    @cached_property
    def quartiles(self) -> tuple[float, float]:
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float(q1), float(q3)

    @property
    def iqr(self) -> float:
        q1, q3 = self.quartiles
        return q3 - q1

    @property
    def rel_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else float("inf")

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def noisy(self) -> bool:
        """The spread stayed above target: compare this case's figures with care."""
        return self.rel_iqr > self.target_rel_iqr

    @property
    def bimodal(self) -> bool:
        """The samples fall into two clusters (`suites.records.contention.bimodal`: each holds
        >= 20% of them, and their nearest members differ by over 1.5x): part of the case ran in
        another mode (beside other work, another kernel or clock), so its median describes
        neither cleanly, however tight its IQR."""
        return two_modes(self.samples)

    @property
    def cut_short(self) -> bool:
        """The steps were too slow for the case's limit: few samples, no timed blocks."""
        return self.stop_reason == OUT_OF_TIME

    @property
    def sustained_step_s(self) -> float | None:
        """Seconds timed / steps timed: what a long run sustains. The median of short blocks
        flatters it on a machine whose interference is right-skewed (occasional slow blocks)."""
        if not self.timed_s or not self.samples:
            return None
        return self.timed_s / (self.n * self.block_size)

    @property
    def straggler(self) -> bool:
        """One rank's own compute (or, where that could not be isolated, its busy time) is over
        `STRAGGLER_RATIO` times another's. Under DDP every step waits in the gradient
        all-reduce, so busy times even out and only the compute times tell ranks apart."""
        times = self.rank_compute or self.rank_medians
        return len(times) > 1 and max(times) > STRAGGLER_RATIO * min(times)

    @property
    def exchange_share(self) -> float | None:
        """The part of the global step the slowest rank's own compute does not explain:
        the cross-rank exchange, and waiting for it."""
        if not self.rank_compute:
            return None
        return max(0.0, 1.0 - max(self.rank_compute) / self.median)

    @property
    def burst_gain(self) -> float | None:
        """How much faster the first timed block ran than the median, where that exceeds the
        spread (a GPU's burst before it settles at its power limit); None otherwise."""
        return burst_gain(self.samples, max(self.rel_iqr, self.target_rel_iqr))

    @property
    def peak_memory_bytes(self) -> int | None:
        """The largest peak of one GPU (allocated) or one rank process (resident)."""
        return largest_peak(self.memory)

    @property
    def peak_reserved_bytes(self) -> int | None:
        """torch on GPUs: the largest peak its caching allocator reserved on one GPU."""
        return largest_reserved(self.memory)

    @property
    def training_state_bytes(self) -> int | None:
        """The largest peak − baseline of one GPU or rank process: memory the training took."""
        return largest_training_state(self.memory)

    @property
    def peak_memory_total_bytes(self) -> int | None:
        """The sum of every GPU's or rank process's peak."""
        return total_peak(self.memory)

    @property
    def compile_s(self) -> float | None:
        """First-step time beyond a steady step: tracing, compilation, lazy init. Never part of
        a sample: the first step is not timed with the others."""
        if self.first_step_s is None:
            return None
        return max(0.0, self.first_step_s - self.median)

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples_s": list(self.samples), "block_size": self.block_size,
            "warmup_steps": self.warmup_steps, "first_step_s": self.first_step_s,
            "target_rel_iqr": self.target_rel_iqr, "stop_reason": self.stop_reason,
            "rank_medians_s": list(self.rank_medians), "rank_compute_s": list(self.rank_compute),
            "timed_s": self.timed_s, "memory": [peak.to_dict() for peak in self.memory],
            "memory_breakdown": [breakdown.to_dict() for breakdown in self.memory_breakdown],
            "energy": self.energy.to_dict() if self.energy else None,
            "recompiles": self.recompiles,
            "telemetry": self.telemetry.to_dict() if self.telemetry else None,
            "cpu": self.cpu.to_dict() if self.cpu else None,
            # Derived, stored for readers that do not recompute:
            "median_s": self.median, "iqr_s": self.iqr, "n": self.n, "noisy": self.noisy,
            "straggler": self.straggler, "cut_short": self.cut_short,
            "compile_s": self.compile_s, "sustained_step_s": self.sustained_step_s,
            "burst_gain": self.burst_gain, "bimodal": self.bimodal,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Measurement":
        return cls(samples=tuple(data["samples_s"]), block_size=data.get("block_size", 1),
                   warmup_steps=data.get("warmup_steps", 0), first_step_s=data.get("first_step_s"),
                   target_rel_iqr=data.get("target_rel_iqr", 0.02),
                   stop_reason=data.get("stop_reason", ""),
                   rank_medians=tuple(data.get("rank_medians_s") or ()),
                   rank_compute=tuple(data.get("rank_compute_s") or ()),
                   timed_s=data.get("timed_s"), recompiles=data.get("recompiles"),
                   memory=tuple(MemoryPeak.from_dict(peak) for peak in data.get("memory") or ()),
                   memory_breakdown=tuple(MemoryBreakdown.from_dict(breakdown)
                                          for breakdown in data.get("memory_breakdown") or ()),
                   energy=EnergyMeasurement.from_dict(data["energy"]) if data.get("energy") else None,
                   telemetry=Telemetry.from_dict(data["telemetry"]) if data.get("telemetry") else None,
                   cpu=CpuUsage.from_dict(data["cpu"]) if data.get("cpu") else None)
