"""Whether other work competed for the CPU while a case ran: load average and steal time.

A busy machine makes a case slow without making it noisy (every block is slow alike), so the
spread alone cannot say so. The runner reads the 1-minute load average (os.getloadavg) and the
CPU counters of /proc/stat (their `steal` column: time a hypervisor gave this VM's CPUs to
someone else) before and after each case; `judge` turns the two readings into the record's
`contention`, with the one rule that marks it `contended`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

PROC_STAT = Path("/proc/stat")
#: Load above the machine's cores by more than this means runnable tasks waited for a core.
LOAD_SLACK = 0.5
#: Share of the CPU time over the case that the hypervisor stole, above which the case is contended.
STEAL_LIMIT = 0.05


@dataclass(frozen=True)
class CpuReading:
    """One reading: the 1-minute load average and /proc/stat's all-CPU jiffies (total, steal);
    None where the system does not offer it."""
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


@dataclass(frozen=True)
class Contention:
    """What competed for the CPU over one case, and the verdict."""
    load_before: float | None
    load_after: float | None
    steal_fraction: float | None  # stolen / all CPU time between the readings; None where unreadable
    cores: int  # logical cores of the machine: what the load average is compared with
    contended: bool
    why: str  # '' when not contended

    def to_dict(self) -> dict[str, Any]:
        return {"load_before": self.load_before, "load_after": self.load_after,
                "steal_fraction": self.steal_fraction, "cores": self.cores, "contended": self.contended,
                "why": self.why}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Contention":
        return cls(data.get("load_before"), data.get("load_after"), data.get("steal_fraction"),
                   int(data.get("cores") or 0), bool(data.get("contended")), str(data.get("why", "")))


def judge(before: CpuReading, after: CpuReading, cores: int) -> Contention:
    """The contention rule, the only one: a case is `contended` when

    - the 1-minute load average, before or after it, exceeds the machine's logical cores by more
      than LOAD_SLACK: the case's own threads can keep at most every core busy (parbench sizes
      its thread pools and ranks to the cores), so more runnable tasks than cores means others
      wanted them too and someone waited — the load average counts the whole machine, so it is
      compared with the whole machine's cores; or
    - the hypervisor stole more than STEAL_LIMIT of the CPU time between the readings.

    The load average is smoothed over a minute: a short case after a busy minute reads that
    minute, which is what its caches and clocks felt too.
    """
    steal = None
    if None not in (before.total_jiffies, after.total_jiffies, before.steal_jiffies, after.steal_jiffies):
        elapsed = after.total_jiffies - before.total_jiffies
        steal = (after.steal_jiffies - before.steal_jiffies) / elapsed if elapsed > 0 else None
    reasons = []
    loads = [load for load in (before.load, after.load) if load is not None]
    if loads and max(loads) > cores + LOAD_SLACK:
        reasons.append(f"load average {max(loads):.1f} on {cores} cores")
    if steal is not None and steal > STEAL_LIMIT:
        reasons.append(f"{steal:.0%} of CPU time stolen by the hypervisor")
    return Contention(before.load, after.load, steal, cores, bool(reasons), "; ".join(reasons))
