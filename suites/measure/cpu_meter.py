"""The CPU meter: the CPU time a case and everyone else took on its cores while it ran.

Over the case's timed blocks (`suites.measure.timing`) a `CpuMeter` reads, just before the first
block and just after the last (an `Instrument`: a case cut short is read over its warm steps):

- /proc/stat's per-CPU counters of the cores the case may run on (the affinity of its root
  process): their busy time, user + nice + system + irq + softirq + steal (guest time is inside
  user and nice already; idle and iowait are not busy). Steal is time the hypervisor gave those
  cores to someone else: it counts as others' time;
- the CPU time of the case's own process tree: utime + stime of its root process and of every
  descendant (its ranks, a TF cluster's servers, their children), plus cutime + cstime
  (children reaped during the window), from /proc/<pid>/stat. The root is the process that
  launched the case, named by `$PARBENCH_CASE_ROOT` (parbench's launcher sets it: itself), else
  under torchrun the elastic agent (this process's parent), else this process;
- the wall time between the two readings.

What it reads is a `suites.records.contention.CpuUsage`, from which the record's contention is
judged there (`judge`). Both counters tick at USER_HZ (100/s): over W seconds on C cores one
tick per core and two per process of the tree are the counters' resolution, stored as
`resolution` (a share).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from suites import knobs
from suites.errors import UserError
from suites.measure.instruments import TIMED_BLOCKS, Instrument, Window
from suites.records.contention import CASE_ROOT_ENV, CpuUsage

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable

PROC = Path("/proc")
#: /proc/stat's busy columns: user nice system (idle iowait) irq softirq steal.
BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)
STEAL_COLUMN = 7


def clock_ticks_per_s() -> int:
    """USER_HZ: the unit of /proc/stat and /proc/<pid>/stat times (100 on Linux)."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def per_cpu_ticks(text: str, cpus: Iterable[int]) -> tuple[int, int] | None:
    """(busy, steal) ticks summed over `cpus` from /proc/stat's `cpuN` lines; None where a
    wanted line is missing or short."""
    lines: dict[int, list[int]] = {}
    for line in text.splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *values = line.split()
            lines[int(name[3:])] = [int(value) for value in values]
    busy = steal = 0
    for cpu in cpus:
        counters = lines.get(cpu)
        if counters is None or len(counters) <= STEAL_COLUMN:
            return None
        busy += sum(counters[column] for column in BUSY_COLUMNS)
        steal += counters[STEAL_COLUMN]
    return busy, steal


def _stat_fields(text: str) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (which may hold spaces and
    parentheses): state, ppid, ... (field 3 onwards of proc(5))."""
    return text[text.rindex(")") + 2:].split()


#: Offsets in `_stat_fields`: ppid (field 4), utime stime cutime cstime (fields 14-17).
PPID, UTIME, STIME, CUTIME, CSTIME = 1, 11, 12, 13, 14


def tree_ticks(root: int, proc: Path = PROC) -> tuple[int, int] | None:
    """(CPU ticks, processes) of `root` and every descendant: utime + stime + cutime + cstime
    of each (cutime/cstime: children already reaped, whose time has moved to their parent).
    None where `root` cannot be read."""
    stats: dict[int, list[str]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stats[int(entry.name)] = _stat_fields((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):  # a process that ended while we looked
            continue
    if root not in stats:
        return None
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[PPID]), []).append(pid)
    ticks, seen, todo = 0, set(), [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        ticks += sum(int(stats[pid][i]) for i in (UTIME, STIME, CUTIME, CSTIME))
        todo.extend(children.get(pid, ()))
    return ticks, len(seen)


def case_root() -> int:
    """The root of this case's process tree: `$PARBENCH_CASE_ROOT` (the launcher), else under
    torchrun the elastic agent (this rank's parent, which started the node's ranks), else this
    process."""
    try:
        root = knobs.read(CASE_ROOT_ENV)
    except UserError:  # not a process id: the case's own tree is this process's
        root = None
    if root:
        return int(root)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return os.getppid()
    return os.getpid()


@dataclass(frozen=True)
class CpuSnapshot:
    """One reading of a `CpuMeter`: wall clock, the case's cores' busy and steal ticks, its
    process tree's ticks and size; None where unreadable."""
    wall_s: float
    busy_ticks: int | None
    steal_ticks: int | None
    own_ticks: int | None
    processes: int = 0


@dataclass
class CpuMeter(Instrument):
    """Reads `CpuSnapshot`s of one case: the tree of `root` (default `case_root()`) and the
    cores of `cpus` (default the root's affinity). `proc`, `clock` and `hz` are injectable, so
    tests read a fake /proc and a controlled clock."""
    root: int | None = None
    cpus: tuple[int, ...] | None = None
    proc: Path = PROC
    clock: Callable[[], float] = time.monotonic
    hz: int = field(default_factory=clock_ticks_per_s)

    def __post_init__(self) -> None:
        if self.root is None:
            self.root = case_root()
        if self.cpus is None:
            try:
                self.cpus = tuple(sorted(os.sched_getaffinity(self.root)))
            except (OSError, AttributeError):
                try:
                    self.cpus = tuple(sorted(os.sched_getaffinity(0)))
                except (OSError, AttributeError):
                    self.cpus = tuple(range(os.cpu_count() or 1))

    def read(self) -> CpuSnapshot:
        """Never raises: what cannot be read is None."""
        # The tree first: the scan of /proc then falls before the cores' reading (outside the
        # window) at the start, and inside both readings at the end, never counted as others'.
        try:
            tree = tree_ticks(int(self.root or 0), self.proc)
        except (OSError, ValueError):
            tree = None
        wall = self.clock()
        try:
            cores = per_cpu_ticks((self.proc / "stat").read_text(), self.cpus or ())
        except (OSError, ValueError):
            cores = None
        return CpuSnapshot(wall, cores[0] if cores else None, cores[1] if cores else None,
                           tree[0] if tree else None, tree[1] if tree else 0)

    def usage(self, before: CpuSnapshot, after: CpuSnapshot, span: str = TIMED_BLOCKS) -> CpuUsage | None:
        """CPU time between two snapshots; None where either could not read the cores or the tree."""
        if None in (before.busy_ticks, after.busy_ticks, before.own_ticks, after.own_ticks):
            return None
        wall = after.wall_s - before.wall_s
        cores = len(self.cpus or ())
        if wall <= 0 or not cores:
            return None
        tick = 1.0 / self.hz
        resolution = (cores + 2 * max(before.processes, after.processes)) * tick / (wall * cores)
        return CpuUsage(wall, (after.own_ticks - before.own_ticks) * tick,
                        (after.busy_ticks - before.busy_ticks) * tick,
                        ((after.steal_ticks or 0) - (before.steal_ticks or 0)) * tick,
                        cores, resolution, span)

    # --- as an instrument: started for the warm-up (after its first step), anew for the timed blocks ---
    what = "the CPU meter"
    covers_warm_up = True

    def start(self) -> None:
        self._started = self.read()

    def stop(self) -> CpuUsage | None:
        """The CPU time since `start`; None where either reading could not read it."""
        return self.usage(self._started, self.read())

    def record(self, runnable: "Runnable", readings: CpuUsage | None, window: Window,
               failure: str = "") -> dict[str, Any]:
        """`cpu`: the usage over `window`, with the threads every rank computes on (gathered)."""
        usage = None if readings is None else replace(readings, span=window.span)
        return {"cpu": with_threads(runnable, usage)}


def with_threads(runnable: "Runnable", usage: CpuUsage | None) -> CpuUsage | None:
    """`usage` with the threads the case computes on, every rank's together (gathered: every
    rank calls this alike). A rank's are its case framework's intra-op threads."""
    case = getattr(runnable, "case", None)
    threads = 0
    if case is not None:
        try:
            from suites.hardware.devices import descriptor

            threads = int(descriptor(case.framework).cpu_threads())
        except Exception:  # a framework that cannot say: starvation is judged on the cores
            threads = 0
    total = int(sum(runnable.gather(float(threads))))
    return None if usage is None else replace(usage, threads=total or None)


def case_meter() -> CpuMeter | None:
    """This case's CPU meter; None where it cannot be built (a system without affinity)."""
    try:
        return CpuMeter()
    except Exception:  # the meter costs a case its contention figures, never its timing
        return None
