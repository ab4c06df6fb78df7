"""The tidy table as CSV and Parquet, for analysis elsewhere.

CSV has no list type, so raw samples are written as a JSON list per cell; Parquet keeps them
as a list column. Parquet needs pyarrow (`pip install "parbench[parquet]"`).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

from suites.errors import UserError
from suites.report.columns import samples_json

PARQUET_MISSING = "--parquet needs pyarrow, which is not installed: pip install \"parbench[parquet]\" (or pyarrow)"


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.assign(samples_s=frame["samples_s"].map(samples_json)).to_csv(path, index=False)
    return path


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    if not parquet_available():
        raise UserError(PARQUET_MISSING)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.assign(samples_s=frame["samples_s"].map(list)).to_parquet(path, index=False)
    return path
