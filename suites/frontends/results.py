"""`suites.load_results`: the report layer's loader, given the analytic work of each case
(`suites.strategies.jobs.case_work`) so that asv and pytest-benchmark rows get the metrics
parbench's own records store. The report layer reads records only; this front end supplies
what needs the code that ran a case."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from suites.report.analyses.comparability import flag
from suites.report.load import files as loading
from suites.strategies.jobs import case_work


def load_results(paths: str | Path | Iterable[str | Path] = loading.DEFAULT_PATHS) -> pd.DataFrame:
    """One tidy row per stored measurement (or unavailable/failed case) found under `paths`
    (`suites.report.load.files.load_results`, with each case's analytic work), each with its
    comparability flags (`suites.report.analyses.comparability.flag`)."""
    return flag(loading.load_results(paths, case_work))
