"""Taking a case's memory breakdown after its timed blocks, on every rank, gathered to rank 0.

The runnable runs one more step under its framework's tracker (`Runnable.memory_tracker`); the
case's memory probe measures that step's own peak around it (`MemoryBreakdown.step_peak_bytes`),
so the tracked moment can be set beside the peak of the very step it was taken in, as well as the
timed steps'. The tracker's hooks cost time: this step is never timed. A tracker that fails costs
the case its breakdown (the reason goes in its details), not its timing.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from suites.records.memory_breakdown import GATHERED, MemoryBreakdown, as_row, from_row
from suites.measure.gathering import gather_rows

if TYPE_CHECKING:
    from suites.measure.memory_probes import MemoryProbe
    from suites.measure.runnable import Runnable

#: Key of a record's details that says why it has no breakdown, where it has none.
DETAIL = "memory_breakdown"


def take_breakdowns(runnable: "Runnable", probe: "MemoryProbe | None") -> tuple[MemoryBreakdown, ...]:
    """Every rank's breakdowns, in rank order (a collective: every rank calls it); () where the
    runnable tracks none or every rank's tracker failed."""
    tracked_step = runnable.memory_tracker()
    if not any(runnable.gather(float(tracked_step is not None))):
        return ()
    own: list[MemoryBreakdown] = []
    peaks = []
    try:
        if probe is not None:
            probe.start()
        own = tracked_step() if tracked_step is not None else []
        peaks = probe.stop() if probe is not None else []
    except Exception as error:  # the tracker's, or a step's under it: the case keeps its timing
        if probe is not None:
            probe.stop()
        runnable.details[DETAIL] = f"failed: {type(error).__name__}: {str(error).strip()[:300]}"
        own = []
    step_peaks = {(peak.kind, peak.device): peak.peak_bytes for peak in peaks}
    own = [dataclasses.replace(breakdown, step_peak_bytes=step_peaks.get((breakdown.kind, breakdown.device)))
           for breakdown in own]
    method = own[0].method if own else ""
    rows = gather_rows(runnable, [as_row(breakdown) for breakdown in own], len(GATHERED))
    return tuple(from_row(rank, row, method) for rank, row in rows)
