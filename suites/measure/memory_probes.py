"""Measuring peak memory over the timed steps: the probe the timer starts and stops, and the CPU one.

A runnable that measures memory returns a `MemoryProbe` from `Runnable.memory_probe`, one of the
timer's instruments (`suites.measure.instruments`). The timer starts it after the first
(compiling) step, starts it again (a reset) just before the timed blocks, and stops it after the
last one; every rank's peaks are then gathered to rank 0 (`gather_peaks`), and one more step under
the framework's tracker says what they are made of (`record`,
`suites.measure.memory_breakdowns`). GPU and TPU probes read their framework's allocator statistics
(`suites.frameworks.<framework>.memory`); the CPU one is here, framework-free.

Why the CPU needs more than `ru_maxrss`: that is the process's high-water mark over its whole
life — imports, the numerics check's float64 reference and every earlier in-process case
included. `ResidentMemoryProbe` resets the kernel's mark (VmHWM) at `start`, by writing "5" to
/proc/self/clear_refs (Linux 4.0+), and reads it at `stop`: the exact peak, at no cost while
the steps run. Where the kernel does not allow that (no /proc, a sandbox), a background
thread samples the resident set (/proc/self/statm) every `SAMPLE_INTERVAL_S` instead; a peak
shorter than that can be missed. Sampling is not the default because each wake-up of the
thread costs ~70 µs on a VM (about 1.5% of a core at 5 ms).

The baseline is the resident set when the case's setup begins, after glibc has handed the free
pages of the C heap back to the kernel (`malloc_trim`): memory an earlier in-process case freed
but the allocator kept would otherwise count as runtime, and this case's training state reuse
it unseen.
"""
from __future__ import annotations

import ctypes
import gc
import os
import re
import threading
from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from suites.records.peak_memory import MemoryPeak
from suites.measure.gathering import gather_rows
from suites.measure.instruments import Instrument, Window
from suites.measure.memory_breakdowns import take_breakdowns

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable

#: Seconds between two reads of the resident set, where it must be sampled. A wake-up of the
#: thread and one read of /proc/self/statm cost ~70 µs on a VM: ~1.5% of one core.
SAMPLE_INTERVAL_S = 0.005

STATM = Path("/proc/self/statm")
STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
#: Written to clear_refs: reset the peak resident set ("high water mark") to the current one.
RESET_HIGH_WATER_MARK = "5"


class MemoryProbe(Instrument):
    """Peak memory of this process's devices between `start` and `stop`."""

    what = "the memory probe"
    #: Started for the warm-up (after its first step), so a case cut short has its warm steps' peak.
    covers_warm_up = True
    #: A probe that fails fails the case: its memory figures are what the memory suite is run for.
    essential = True

    @abstractmethod
    def start(self) -> None:
        """Forget earlier peaks: from now on. Starting a started probe starts it anew."""

    @abstractmethod
    def stop(self) -> list[MemoryPeak]:
        """The peaks since `start`, one per device of this process (rank 0 until gathered)."""

    def release_cached(self) -> None:
        """Give back what an allocator keeps cached but no tensor uses (after the check: its
        fp32 reference's blocks would otherwise count in the timed steps' reserved peak).
        Nothing to do where the peak is the process's resident set."""

    def record(self, runnable: "Runnable", readings: list[MemoryPeak] | None, window: Window,
               failure: str = "") -> dict[str, Any]:
        """`memory`: every rank's peaks; `memory_breakdown`: what they are made of, from one more,
        untimed step under the framework's memory tracker (every rank calls this alike)."""
        return {"memory": gather_peaks(runnable, readings or []), "memory_breakdown": take_breakdowns(runnable, self)}


def rss_bytes() -> int | None:
    """This process's resident set now, bytes; None where /proc is not there."""
    try:
        return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the kernel (glibc `malloc_trim(0)`; elsewhere nothing)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def baseline_rss_bytes() -> int | None:
    """The resident set a case starts from: after collecting garbage cycles (an earlier case's
    autograd graphs, closures) and `release_free_heap`, so it is what the process holds, not
    what its allocator kept of earlier cases."""
    gc.collect()
    release_free_heap()
    return rss_bytes()


def reset_high_water_mark() -> bool:
    """Reset this process's VmHWM to its current resident set; False where not allowed."""
    try:
        with CLEAR_REFS.open("w") as handle:
            handle.write(RESET_HIGH_WATER_MARK)
        return True
    except OSError:
        return False


def high_water_mark_bytes() -> int | None:
    """The process's peak resident set since the last reset (VmHWM); None where unknown."""
    try:
        match = re.search(r"^VmHWM:\s+(\d+)\s+kB", STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


class ResidentSetSampler:
    """The largest resident set read between `start` and `stop`, reading every `interval_s` from a
    daemon thread (which sleeps between reads, outside the GIL)."""

    def __init__(self, read: Callable[[], int | None] = rss_bytes,
                 interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.read, self.interval_s = read, interval_s
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._peak: int | None = None
        self.reads = 0

    def _sample(self) -> None:
        value = self.read()
        self.reads += 1
        if value is not None and (self._peak is None or value > self._peak):
            self._peak = value

    def _run(self, done: threading.Event) -> None:
        while not done.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        self.stop()
        self._peak, self.reads = None, 0
        self._done = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, args=(self._done,), name="parbench-rss", daemon=True)
        self._thread.start()

    def stop(self) -> int | None:
        """The peak since `start` (None if never started or nothing could be read)."""
        if self._thread is not None:
            self._done.set()
            self._thread.join()
            self._thread = None
            self._sample()  # the state at the end counts too
        return self._peak


class ResidentMemoryProbe(MemoryProbe):
    """CPU: this process's peak resident set — the kernel's high-water mark since `start` where it
    can be reset, else sampled — beside its resident set when setup began."""

    def __init__(self, baseline_bytes: int | None, sampler: ResidentSetSampler | None = None,
                 reset: Callable[[], bool] = reset_high_water_mark,
                 high_water_mark: Callable[[], int | None] = high_water_mark_bytes) -> None:
        self.baseline_bytes = baseline_bytes
        self.sampler = sampler or ResidentSetSampler()
        self._reset, self._high_water_mark = reset, high_water_mark
        self.sampling = False

    def start(self) -> None:
        """Reset the peak. First the C heap's free pages go back to the kernel: what the
        numerics check (its float64 reference) or warm-up freed stays resident otherwise, and
        would count as the steps' peak."""
        self.sampler.stop()
        gc.collect()
        release_free_heap()
        self.sampling = not self._reset()
        if self.sampling:
            self.sampler.start()

    def stop(self) -> list[MemoryPeak]:
        if self.sampling:
            peak = self.sampler.stop()
        else:  # the mark, or the resident set now where the kernel's approximate counters put it higher
            peak = max((value for value in (self._high_water_mark(), self.sampler.read()) if value is not None),
                       default=None)
        self.sampling = False
        return [] if peak is None else [MemoryPeak("cpu", 0, peak, baseline_bytes=self.baseline_bytes)]


#: A peak's kind as a gathered float (its index here).
_KINDS = ("cpu", "gpu", "tpu")


def _int(figure: float | None) -> int | None:
    return None if figure is None else int(figure)


def gather_peaks(runnable: "Runnable", peaks: list[MemoryPeak]) -> tuple[MemoryPeak, ...]:
    """Every rank's peaks, in rank order, through the runnable's float `gather` (a collective:
    every rank calls it, whatever its own number of devices). One process: its own peaks, as
    its probe labelled them (a parameter-server chief's probe reads every task's)."""
    if len(runnable.gather(0.0)) == 1:
        return tuple(sorted(peaks, key=lambda peak: (peak.rank, peak.device)))
    rows = [(_KINDS.index(peak.kind), peak.device, peak.peak_bytes, peak.reserved_bytes, peak.baseline_bytes,
             peak.outside_allocator_bytes) for peak in peaks]
    gathered = [MemoryPeak(_KINDS[int(kind)], int(device), int(peak), _int(reserved), _int(baseline), rank,
                           _int(outside))
                for rank, (kind, device, peak, reserved, baseline, outside) in gather_rows(runnable, rows, 6)
                if kind is not None and device is not None and peak is not None]
    return tuple(sorted(gathered, key=lambda peak: (peak.rank, peak.device)))
