"""`ReportFrame`: the records as every part of a report reads them, built once.

The tidy table of `suites.report.load` is made one machine per hardware (`machines`: labels of
one hardware are one machine), given each row's work (`work`: what pairs with what), flagged
(`comparability.flag`: which rows may enter a ratio, and why not), priced (`prices.add_costs`)
and fingerprinted (each row's device type and workload family, `device_types`), and the views
the sections and the first screen read are made on first use and then shared: at a fleet's size
a view is a copy of most of the table (1,000 machines: ~100 MB), so none is made twice. A view is
handed out as a shallow copy: a section that adds a column to it keeps that column to itself
(copy-on-write).
"""
from __future__ import annotations

from typing import Callable

import pandas as pd

from suites.report.analyses import selection
from suites.report.analyses.comparability import flag
from suites.records.work_fingerprint import Definitions
from suites.report.analyses.device_types import device_type, family
from suites.report.analyses.machines import add_run_swing, one_machine_per_hardware
from suites.report.analyses.prices import PriceTable, add_costs
from suites.report.analyses.work import add_work


class _View:
    """A view of the frame's records, made on first use by `make` and then kept: each access hands
    out a shallow copy, so a caller's added column stays its own (copy-on-write)."""

    def __init__(self, make: Callable[[ReportFrame], pd.DataFrame | pd.Series]):
        self.make = make

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, frame: ReportFrame, owner: type | None = None):  # noqa: ANN204 (a frame or a series)
        if self.name not in frame._views:
            frame._views[self.name] = self.make(frame)
        return frame._views[self.name].copy(deep=False)


class ReportFrame:
    """Every record (`records`: flagged and priced) and its views, each made once."""

    def __init__(self, records: pd.DataFrame, definitions: Definitions | None = None):
        self._records = records
        self._views: dict[str, pd.DataFrame | pd.Series] = {}
        #: What a case's names meant, for the work of records older than their stored work.
        self.definitions = definitions

    @classmethod
    def build(cls, tidy: pd.DataFrame, prices: PriceTable, definitions: Definitions | None = None) -> ReportFrame:
        """The frame of a report over `tidy` (as loaded) at `prices`; `definitions` resolve older
        records' work (`work.add_work`)."""
        return cls(add_costs(flag(add_work(one_machine_per_hardware(tidy), definitions)), prices), definitions)

    @property
    def records(self) -> pd.DataFrame:
        """Every row: superseded, failed and unavailable ones too (the exports hold them all)."""
        return self._records.copy(deep=False)

    #: The most recent row of every case on every machine (`selection.latest`).
    latest = _View(lambda frame: add_run_swing(selection.latest(frame._records), frame._records))
    #: Latest rows that ran, with a throughput and no failed check.
    usable = _View(lambda frame: selection.usable(frame.latest))
    #: Latest rows that may stand in a cross-machine ratio, rank, price or crown.
    comparable = _View(lambda frame: selection.comparable(frame.latest))
    #: Latest rows that may stand in a ratio within their own machine.
    pairable = _View(lambda frame: selection.pairable(frame.latest))
    #: Latest usable rows left out of every ratio, rank and price, each with its `why_not`.
    not_comparable = _View(lambda frame: selection.not_comparable(frame.latest))
    #: Latest unavailable and failed rows, each with its reason.
    not_ok = _View(lambda frame: selection.not_ok(frame.latest))
    #: Each record's device type ('H100 80GB HBM3 ×1', 'AMD EPYC · 2 cores'), by the records' index.
    device_types = _View(lambda frame: device_type(frame._records))
    #: Each record's workload family ('ResNet-50', 'matmul'), by the records' index.
    families = _View(lambda frame: family(frame._records))
