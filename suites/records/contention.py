"""Whether other work competed for the case's cores while it was timed: measured, not guessed.

A busy machine makes a case slow without making it noisy (every block is slow alike), so the
spread alone cannot say so. Over the case's timed blocks the CPU meter
(`suites.measure.cpu_meter.CpuMeter`) reads the CPU time of the case's cores (everyone's, steal
included) and of the case's own process tree: a `CpuUsage`, the record's `measurement.cpu`. This
module is the record's side: what was read, and the verdict on it.

Then `others = busy - own`, and both are shared over `wall x cores`: `others_core_share` is
the part of the case's cores that other processes (or the hypervisor) took, `own_core_share`
the part the case's processes ran; `own_thread_share` is the case's CPU time over wall x its
threads (at most its cores), on which starvation is judged. `judge` turns that into the record's
`contention`, with the one rule that marks it `contended` (`CONTENDED_SHARE`) and the one that
marks it `starved` (`STARVED_SHARE`). A case without such a measurement (no timed blocks: failed;
a system without /proc) falls back to the 1-minute load average and the steal column
(`read_cpu`), which lag and count parbench itself; the record's `method` says which.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

PROC = Path("/proc")
PROC_STAT = PROC / "stat"
#: Load above the machine's cores by more than this means runnable tasks waited for a core
#: (the fallback rule, where the CPU time over the timed blocks could not be read).
LOAD_SLACK = 0.5
#: Share of the CPU time over the case that the hypervisor stole, above which the case is
#: contended (the fallback rule; the measured rule counts steal among the others' time).
STEAL_LIMIT = 0.05
#: Other processes (and the hypervisor's steal) took more than this share of the case's cores
#: over its timed blocks: the case is `contended`. A quarter of a core per core: a compute-bound
#: case that had at most 3/4 of its cores runs a third slower or worse, far past the spread
#: parbench aims for (2-5%), while what is always there stays far below it: kernel threads, a
#: shell, the parbench process that waits for the case (its own tree's, not others', where it
#: launched the case), and the counters' tick resolution (0.01-0.05 of a core per core over the
#: >= 0.3 s a case is timed). Two busy loops on a 2-core machine take about half of each core.
CONTENDED_SHARE = 0.25
#: A CPU case whose processes ran less than this share of wall x its threads (its frameworks'
#: intra-op threads, every rank's, at most its cores) over its timed blocks is `starved`: its
#: threads spent more than half the time not running, because others took the cores
#: (`others_core_share` says so) or because it idles by itself (single-threaded parts, waiting
#: on its peers). Starved alone does not make a case contended.
STARVED_SHARE = 0.5
#: What a measured verdict says it was measured with; the fallback's method.
METHOD = "proc_stat: case's cores busy - case's process tree, over the timed blocks"
FALLBACK_METHOD = "load_average: 1-minute load average and steal, before and after the case"
#: Environment variable naming the root process of a case's process tree (the launcher's pid).
CASE_ROOT_ENV = "PARBENCH_CASE_ROOT"


@dataclass(frozen=True)
class CpuReading:
    """One reading: the 1-minute load average and /proc/stat's all-CPU jiffies (total, steal);
    None where the system does not offer it. The fallback rule's input."""
    load: float | None
    total_jiffies: int | None = None
    steal_jiffies: int | None = None


def read_cpu(stat_path: Path = PROC_STAT,
             loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg) -> CpuReading:
    try:
        load: float | None = loadavg()[0]
    except OSError:
        load = None
    try:
        fields = stat_path.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return CpuReading(load)
    if fields[0] != "cpu" or len(fields) < 9:  # steal is the 8th counter (Linux >= 2.6.11)
        return CpuReading(load)
    counters = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return CpuReading(load, sum(counters), counters[7])


# --- what the CPU meter reads (`suites.measure.cpu_meter`) ----------------------------------------

@dataclass(frozen=True)
class CpuUsage:
    """CPU time over a case's timed blocks: the case's own, and everyone's on its cores."""
    wall_s: float
    #: CPU seconds of the case's process tree.
    own_s: float
    #: CPU seconds any process spent on the case's cores (steal included).
    busy_s: float
    #: Seconds the hypervisor stole from the case's cores.
    steal_s: float
    #: The cores the case may run on (its root process's affinity).
    cores: int
    #: Share of wall x cores one clock tick per core and two per process amount to.
    resolution: float = 0.0
    #: What the window spans: the timed blocks, or (a case cut short) its warm-up steps.
    span: str = "timed blocks"
    #: Threads the case computes on, every rank's together (its frameworks' intra-op threads);
    #: None where unknown.
    threads: int | None = None

    @property
    def others_s(self) -> float:
        return max(0.0, self.busy_s - self.own_s)

    @property
    def others_core_share(self) -> float | None:
        """Share of the case's cores that other processes (and steal) took; None without a span."""
        capacity = self.wall_s * self.cores
        return self.others_s / capacity if capacity > 0 else None

    @property
    def own_core_share(self) -> float | None:
        capacity = self.wall_s * self.cores
        return self.own_s / capacity if capacity > 0 else None

    @property
    def busy_threads(self) -> int:
        """The threads the case should keep busy: its threads, at most its cores (its cores
        where its threads are unknown)."""
        return min(self.threads, self.cores) if self.threads else self.cores

    @property
    def own_thread_share(self) -> float | None:
        """The case's CPU time over wall x its busy threads: 1 where every thread ran all along."""
        capacity = self.wall_s * self.busy_threads
        return self.own_s / capacity if capacity > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s, "own_s": self.own_s, "busy_s": self.busy_s, "steal_s": self.steal_s,
                "cores": self.cores, "resolution": self.resolution, "span": self.span, "threads": self.threads}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CpuUsage":
        return cls(float(data["wall_s"]), float(data["own_s"]), float(data["busy_s"]),
                   float(data.get("steal_s") or 0.0), int(data["cores"]), float(data.get("resolution") or 0.0),
                   str(data.get("span", "timed blocks")), data.get("threads"))


# --- the verdict -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Contention:
    """Whether other work competed for the case's cores while it ran: what competed, and the verdict."""
    #: 1-minute load averages before and after the case: the fallback rule's input, where the CPU
    #: time was not measured; None where unreadable.
    load_before: float | None
    load_after: float | None
    #: Stolen / all CPU time between the readings; None where unreadable.
    steal_fraction: float | None
    #: The case's cores (measured), else the machine's logical cores (fallback).
    cores: int
    #: Others took more than `threshold` of the case's cores (the fallback: the load or the steal
    #: was over its limit).
    contended: bool
    #: Why it is contended ('' when not contended).
    why: str
    #: Share of the case's cores other processes (and steal) took over its timed blocks; None: not measured.
    others_core_share: float | None = None
    #: Share of the case's cores its own process tree ran; None: not measured.
    own_core_share: float | None = None
    #: A CPU case whose threads ran less than STARVED_SHARE of the time; None: not judged.
    starved: bool | None = None
    #: Which rule gave the verdict: METHOD (measured) or FALLBACK_METHOD (load average).
    method: str = FALLBACK_METHOD
    #: The counters' resolution, as a share of the case's cores (see the module's docstring).
    resolution: float | None = None
    #: Wall seconds the shares were measured over, and what that span was.
    wall_s: float | None = None
    span: str = ""
    #: How many times the case was measured (re-measured while contended), and the
    #: others_core_share of every measurement, in order; the record keeps one of them.
    attempts: int = 1
    attempt_shares: tuple[float | None, ...] = ()
    #: The others_core_share above which the case is contended (CONTENDED_SHARE, 0.25).
    threshold: float = CONTENDED_SHARE
    #: The threads the case should keep busy (at most its cores), and the share of wall x those
    #: threads its processes ran: what `starved` is judged on. None: not measured.
    threads: int | None = None
    own_thread_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"load_before": self.load_before, "load_after": self.load_after,
                "steal_fraction": self.steal_fraction, "cores": self.cores, "contended": self.contended,
                "why": self.why, "others_core_share": self.others_core_share,
                "own_core_share": self.own_core_share, "starved": self.starved, "method": self.method,
                "resolution": self.resolution, "wall_s": self.wall_s, "span": self.span,
                "attempts": self.attempts, "attempt_shares": list(self.attempt_shares),
                "threshold": self.threshold, "threads": self.threads, "own_thread_share": self.own_thread_share}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Contention":
        return cls(data.get("load_before"), data.get("load_after"), data.get("steal_fraction"),
                   int(data.get("cores") or 0), bool(data.get("contended")), str(data.get("why", "")),
                   data.get("others_core_share"), data.get("own_core_share"), data.get("starved"),
                   str(data.get("method") or FALLBACK_METHOD), data.get("resolution"), data.get("wall_s"),
                   str(data.get("span") or ""), int(data.get("attempts") or 1),
                   tuple(data.get("attempt_shares") or ()), float(data.get("threshold") or CONTENDED_SHARE),
                   data.get("threads"), data.get("own_thread_share"))


def judge(before: CpuReading, after: CpuReading, cores: int, usage: CpuUsage | None = None,
          busy_expected: bool = False) -> Contention:
    """The contention rule, the only one.

    Measured (`usage`, the CPU time over the case's timed blocks): the case is `contended` when
    other processes and the hypervisor took more than CONTENDED_SHARE of its cores; a case
    whose threads should be busy (`busy_expected`: a CPU case that computes, not a collective,
    not a GPU case whose host thread waits on the device) is `starved` when its processes ran
    less than STARVED_SHARE of wall x its threads (at most its cores).

    Fallback, without `usage`: `contended` when the 1-minute load average before or after the
    case exceeds the machine's `cores` by more than LOAD_SLACK, or the hypervisor stole more
    than STEAL_LIMIT of the CPU time between the readings. The load average lags a minute and
    counts the case's own threads: a coarse verdict, named as such in `method`.
    """
    steal = None
    if None not in (before.total_jiffies, after.total_jiffies, before.steal_jiffies, after.steal_jiffies):
        elapsed = after.total_jiffies - before.total_jiffies
        steal = (after.steal_jiffies - before.steal_jiffies) / elapsed if elapsed > 0 else None
    others = usage.others_core_share if usage is not None else None
    if usage is not None and others is not None:
        own, ran = usage.own_core_share, usage.own_thread_share
        steal = usage.steal_s / (usage.wall_s * usage.cores)
        contended = others > CONTENDED_SHARE
        starved = (ran is not None and ran < STARVED_SHARE) if busy_expected else None
        reasons = []
        if contended:
            reasons.append(f"others took {others:.0%} of its {usage.cores} cores"
                           + (f" ({steal:.0%} stolen by the hypervisor)" if steal >= 0.01 else ""))
        if contended and starved:
            reasons.append(f"its {usage.busy_threads} threads ran {ran:.0%} of the time")
        return Contention(before.load, after.load, steal, usage.cores, contended, "; ".join(reasons),
                          others, own, starved, METHOD, usage.resolution, usage.wall_s, usage.span,
                          attempt_shares=(others,), threads=usage.busy_threads, own_thread_share=ran)
    reasons = []
    loads = [load for load in (before.load, after.load) if load is not None]
    if loads and max(loads) > cores + LOAD_SLACK:
        reasons.append(f"load average {max(loads):.1f} on {cores} cores")
    if steal is not None and steal > STEAL_LIMIT:
        reasons.append(f"{steal:.0%} of CPU time stolen by the hypervisor")
    return Contention(before.load, after.load, steal, cores, bool(reasons), "; ".join(reasons))


def with_attempts(kept: Contention, shares: Iterable[float | None]) -> Contention:
    """`kept` (the verdict of the measurement a record keeps), saying how many measurements
    were taken and every one's others_core_share."""
    shares = tuple(shares)
    return replace(kept, attempts=len(shares), attempt_shares=shares)


def bimodal(samples: Iterable[float], gap: float = 1.5, share: float = 0.2, fewest: int = 5) -> bool:
    """Two modes: sorted, the samples split into a fast and a slow cluster, each holding at least
    `share` of them (at least one sample), whose nearest members differ by more than `gap` times.

    A case that ran part of its blocks beside other work (or switched kernels, or lost a boost
    clock) shows two clusters; its median is one of them, or between them, and its IQR may
    still look tight within each. 1.5x is far past any spread a case is kept for (2-5%), and
    far past the tail of a quiet case's blocks; 20% keeps a few outliers (a collection, a page
    fault) from reading as a mode. Fewer than `fewest` samples: not judged (False)."""
    ordered = sorted(float(s) for s in samples)
    n = len(ordered)
    if n < fewest:
        return False
    least = max(1, math.ceil(n * share - 1e-9))
    for split in range(least, n - least + 1):
        low, high = ordered[split - 1], ordered[split]
        if low > 0 and high / low > gap:
            return True
    return False
