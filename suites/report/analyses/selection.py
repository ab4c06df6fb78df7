"""Which rows an analysis looks at: the latest record of each case on each machine, those that ran
and computed the right thing, and those the comparability flags let into a ratio. Older and failed
rows stay in the table and its exports. Each function is a selection of a flagged table
(`comparability.flag`); `frame.ReportFrame` makes each of a report's views once."""
from __future__ import annotations

import pandas as pd


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """The most recent row of every case on every machine, whichever front end measured it."""
    keys = frame[["timestamp", "machine", "case_id"]]  # chosen on the keys, the rows taken once
    kept = (keys.sort_values("timestamp", kind="stable", na_position="first")
            .drop_duplicates(subset=["machine", "case_id"], keep="last").index.sort_values())
    # nothing superseded: no copy (a caller's added column stays in its own frame: copy-on-write)
    return frame.copy(deep=False) if len(kept) == len(frame) else frame.loc[kept]


def usable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that ran, have a throughput and did not fail their numerics check. A row whose
    source stored no check (asv) is usable: not checked is not the same as wrong."""
    not_wrong = frame["check_passed"].ne(False).fillna(True)  # NA (no check stored) is not False
    keep = frame["status"].eq("ok") & frame["throughput"].notna() & not_wrong
    return frame[keep.fillna(False).astype(bool)]


def not_ok(frame: pd.DataFrame) -> pd.DataFrame:
    """Unavailable and failed cases, each with its reason: listed, never dropped."""
    return frame[frame["status"].ne("ok")]


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that may stand in a cross-machine ratio, a rank, a price or a crown
    (`comparability`: usable, on real hardware, none contended, starved, bimodal, launch- or
    host-bound, or above a peak)."""
    return frame[frame["comparable"].astype(bool)]


def pairable(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that may stand in a ratio within their own machine (`comparability`)."""
    return frame[frame["pairable"].astype(bool)]


def not_comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Usable rows that are left out of every cross-machine ratio, rank and price, each with its
    `why_not`: listed, never dropped silently."""
    rows = usable(frame)
    return rows[~rows["comparable"].astype(bool)]
