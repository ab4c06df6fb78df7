"""Gathering rows of figures from every rank through a runnable's float `gather`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from suites.measure.runnable import Runnable

#: Stands for "no figure" in a gathered float: gathers sum one-hot vectors, where a NaN would
#: spread to every rank's slot. Every figure gathered this way is >= 0.
_NONE = -1.0

Row = Sequence[float | None]


def _gathered(runnable: "Runnable", value: float | None) -> list[float | None]:
    return [None if figure < 0 else figure
            for figure in runnable.gather(_NONE if value is None else float(value))]


def gather_rows(runnable: "Runnable", rows: Sequence[Row], width: int) -> list[tuple[int, tuple[float | None, ...]]]:
    """Every rank's `rows` (each `width` non-negative figures or None), as (rank, row) in rank
    order — a collective: every rank calls it, whatever its own number of rows. One process:
    its own rows, rank 0."""
    counts = [int(count) for count in runnable.gather(float(len(rows)))]
    gathered: list[tuple[int, tuple[float | None, ...]]] = []
    for index in range(max(counts, default=0)):
        mine = rows[index] if index < len(rows) else (None,) * width
        columns = [_gathered(runnable, figure) for figure in mine]
        gathered += [(rank, tuple(values)) for rank, values in enumerate(zip(*columns)) if index < counts[rank]]
    return sorted(gathered, key=lambda item: item[0])
