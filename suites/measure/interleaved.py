"""Two things timed interleaved, A B B A, so that drift of the machine (clocks, heat, other
processes) falls on both alike: the ratio of each round's times, and their geometric mean.

Used where two implementations of the same work are compared on one machine (`parbench parity`):
absolute times on a busy machine mean little, a ratio measured this way still does. Interleaving
cancels drift that is slow against a round; it cannot cancel other work that comes and goes
within one, which falls on one side's blocks and not the other's. So, given a `CpuMeter`, each
side's CPU time is read around each of its blocks and summed per side (`a_cpu`, `b_cpu`: the
case's own CPU time and everyone's on its cores over that side's timed blocks alone), from which
`suites.records.contention.judge` says, as it does for `parbench run`, whether others took that
side's cores.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Iterable

from suites.measure.cpu_meter import CpuMeter
from suites.records.contention import CpuUsage


@dataclass(frozen=True)
class Interleaved:
    """Seconds of every timed block of A and of B (two per round each), and per round A's speed
    over B's: (B's two blocks) / (A's two blocks). With a meter, the CPU time over each side's
    blocks (`combined_usage` of its blocks' readings); None without one or where unreadable."""

    a_seconds: tuple[float, ...]
    b_seconds: tuple[float, ...]
    round_ratios: tuple[float, ...]
    a_cpu: CpuUsage | None = None
    b_cpu: CpuUsage | None = None

    @property
    def ratio(self) -> float:
        """A's speed over B's: the geometric mean of the rounds' ratios (>1: A is faster)."""
        return statistics.geometric_mean(self.round_ratios)


def combined_usage(usages: Iterable[CpuUsage | None], span: str) -> CpuUsage | None:
    """Several readings of one side (its blocks) as one: wall, own, busy and steal seconds
    summed; the resolution is the readings' tick uncertainty summed over the summed capacity.
    None where any block could not be read (a partial sum would understate the others)."""
    usages = list(usages)
    if not usages or any(usage is None for usage in usages):
        return None
    wall = sum(usage.wall_s for usage in usages)
    if wall <= 0:
        return None
    first = usages[0]
    return CpuUsage(wall, sum(usage.own_s for usage in usages), sum(usage.busy_s for usage in usages),
                    sum(usage.steal_s for usage in usages), first.cores,
                    sum(usage.resolution * usage.wall_s for usage in usages) / wall, span, first.threads)


def _metered(block: Callable[[], float], meter: CpuMeter | None,
             readings: list[CpuUsage | None]) -> Callable[[], float]:
    """`block`, with the meter read just before and just after it (outside its own clock)."""
    if meter is None:
        return block

    def timed() -> float:
        before = meter.read()
        seconds = block()
        readings.append(meter.usage(before, meter.read()))
        return seconds
    return timed


def abba(time_a: Callable[[], float], time_b: Callable[[], float], rounds: int,
         meter: CpuMeter | None = None) -> Interleaved:
    """`rounds` rounds of A, B, B, A; `time_a` and `time_b` each time one block of the same work
    (warmed up already) and return its seconds. With `meter`, each side's CPU time over its own
    blocks is read too (`Interleaved.a_cpu`, `b_cpu`)."""
    if rounds < 1:
        raise ValueError(f"rounds = {rounds}: at least one round of A B B A is needed")
    a_readings: list[CpuUsage | None] = []
    b_readings: list[CpuUsage | None] = []
    block_a, block_b = _metered(time_a, meter, a_readings), _metered(time_b, meter, b_readings)
    a_seconds, b_seconds, ratios = [], [], []
    for _ in range(rounds):
        a1, b1, b2, a2 = block_a(), block_b(), block_b(), block_a()
        a_seconds += [a1, a2]
        b_seconds += [b1, b2]
        ratios.append((b1 + b2) / (a1 + a2))
    span = f"{2 * rounds} timed blocks, interleaved A B B A"
    return Interleaved(tuple(a_seconds), tuple(b_seconds), tuple(ratios),
                       combined_usage(a_readings, span) if meter else None,
                       combined_usage(b_readings, span) if meter else None)
