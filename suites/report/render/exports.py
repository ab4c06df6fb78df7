"""The tidy table as CSV and Parquet, for analysis elsewhere; `write_whole`, how every file of a
report is written.

CSV has no list type, so raw samples are written as a JSON list per cell; Parquet keeps them
as a list column. Parquet needs pyarrow (`pip install "parbench[parquet]"`).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable

import pandas as pd

from suites.errors import UserError
from suites.report.load.columns import samples_json

PARQUET_MISSING = "--parquet needs pyarrow, which is not installed: pip install \"parbench[parquet]\" (or pyarrow)"


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def write_whole(path: Path, write: Callable[[Path], object]) -> Path:
    """`write(temporary)` into a temporary file beside `path`, then rename it over `path`: a
    reader sees the old file or the new one, never a part. On any failure (a full disk) the
    temporary file is removed and the old file stays as it was; an OSError becomes a one-line
    UserError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)  # a disk that takes the bytes but not the blocks says so here, not later
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException as error:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
        if isinstance(error, OSError):
            raise UserError(f"cannot write {path} ({error.strerror or error}); the previous {path.name}, if any, "
                            f"is left as it was; free space there or pass -o DIR elsewhere") from None
        raise
    return path


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    table = frame.assign(samples_s=frame["samples_s"].map(samples_json))
    return write_whole(path, lambda temporary: table.to_csv(temporary, index=False))


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    if not parquet_available():
        raise UserError(PARQUET_MISSING)
    table = frame.assign(samples_s=frame["samples_s"].map(lambda samples: [float(value) for value in samples]))
    return write_whole(path, lambda temporary: table.to_parquet(temporary, index=False))
