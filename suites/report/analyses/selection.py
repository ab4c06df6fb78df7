"""Which rows an analysis looks at: the latest record of each case on each machine, and those
that ran and computed the right thing. Older and failed rows stay in the table and its exports."""
from __future__ import annotations

import weakref

import pandas as pd

from suites.report.analyses.comparability import flagged


#: `latest` of the last frame it was given: every section asks it of the same table, and at a
#: fleet's size each answer is a copy of most of it (1,000 machines: ~100 MB), so it is made once.
_LATEST: tuple["weakref.ref[pd.DataFrame] | None", pd.DataFrame | None] = (None, None)


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """The most recent row of every case on every machine, whichever front end measured it."""
    global _LATEST
    known, answer = _LATEST
    if known is None or known() is not frame or answer is None:
        keys = frame[["timestamp", "machine", "case_id"]]  # chosen on the keys, the rows taken once
        kept = (keys.sort_values("timestamp", kind="stable", na_position="first")
                .drop_duplicates(subset=["machine", "case_id"], keep="last").index.sort_values())
        answer = frame if len(kept) == len(frame) else frame.loc[kept]  # nothing superseded: no copy
        _LATEST = (weakref.ref(frame), answer)
    # a caller may add or set columns: under copy-on-write (pandas >= 3) that stays in its copy
    return answer.copy(deep=False)


def usable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that ran, have a throughput and did not fail their numerics check. A row whose
    source stored no check (asv) is usable: not checked is not the same as wrong."""
    not_wrong = frame["check_passed"].ne(False).fillna(True)  # NA (no check stored) is not False
    keep = frame["status"].eq("ok") & frame["throughput"].notna() & not_wrong
    return frame[keep.fillna(False).astype(bool)]


def not_ok(frame: pd.DataFrame) -> pd.DataFrame:
    """Unavailable and failed cases, each with its reason: listed, never dropped."""
    return frame[frame["status"].ne("ok")]


def real_hardware(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows measured on real devices: emulated ones (several logical devices or ranks sharing one
    CPU) measure the emulation, so no hardware ranking or price comparison takes them."""
    return frame[~frame["emulated"].fillna(False).astype(bool)]


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that may stand in a cross-machine ratio, a rank, a price or a crown
    (`comparability`: usable, on real hardware, none contended, starved, bimodal, launch- or
    host-bound, or above a peak)."""
    frame = flagged(frame)
    return frame[frame["comparable"].astype(bool)]


def pairable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that may stand in a ratio within their own machine (`comparability`)."""
    frame = flagged(frame)
    return frame[frame["pairable"].astype(bool)]


def not_comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Usable rows that are left out of every cross-machine ratio, rank and price, each with its
    `why_not`: listed, never dropped silently."""
    rows = usable(flagged(frame))
    return rows[~rows["comparable"].astype(bool)]
