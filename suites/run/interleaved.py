"""Two things timed interleaved, A B B A, so that drift of the machine (clocks, heat, other
processes) falls on both alike: the ratio of each round's times, and their geometric mean.

Used where two implementations of the same work are compared on one machine (`parbench parity`):
absolute times on a busy machine mean little, a ratio measured this way still does.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Interleaved:
    """Seconds of every timed block of A and of B (two per round each), and per round A's speed
    over B's: (B's two blocks) / (A's two blocks)."""

    a_seconds: tuple[float, ...]
    b_seconds: tuple[float, ...]
    round_ratios: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """A's speed over B's: the geometric mean of the rounds' ratios (>1: A is faster)."""
        return statistics.geometric_mean(self.round_ratios)


def abba(time_a: Callable[[], float], time_b: Callable[[], float], rounds: int) -> Interleaved:
    """`rounds` rounds of A, B, B, A; `time_a` and `time_b` each time one block of the same work
    (warmed up already) and return its seconds."""
    if rounds < 1:
        raise ValueError(f"rounds = {rounds}: at least one round of A B B A is needed")
    a_seconds, b_seconds, ratios = [], [], []
    for _ in range(rounds):
        a1, b1, b2, a2 = time_a(), time_b(), time_b(), time_a()
        a_seconds += [a1, a2]
        b_seconds += [b1, b2]
        ratios.append((b1 + b2) / (a1 + a2))
    return Interleaved(tuple(a_seconds), tuple(b_seconds), tuple(ratios))
