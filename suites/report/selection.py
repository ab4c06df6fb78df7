"""Which rows an analysis looks at: the latest record of each case on each machine, and those
that ran and computed the right thing. Older and failed rows stay in the table and its exports."""
from __future__ import annotations

import pandas as pd


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """The most recent row of every case on every machine, whichever front end measured it."""
    return (frame.sort_values("timestamp", kind="stable", na_position="first")
            .drop_duplicates(subset=["machine", "case_id"], keep="last")
            .sort_index())


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
