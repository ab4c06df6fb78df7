"""`load_results`: parbench, asv and pytest-benchmark results from any mix of files and folders,
as one tidy pandas DataFrame (columns: suites.report.load.columns.COLUMNS).

Files are recognised by content, not by name: JSON Lines are parbench records; a JSON object
with commit_hash/env_name/results is an asv results file; one with machine_info/benchmarks is
pytest-benchmark's. asv's own bookkeeping (benchmarks.json, machine.json) and parbench's
calibration.json are not results and are passed over. A file that cannot be read, or is none
of these, costs a ResultsWarning naming it; everything else still loads.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd

from suites.records.store import ResultsStore, ResultsWarning
from suites.report.load import asv, parbench, pytest_benchmark
from suites.report.load.columns import retidy, tidy
from suites.report.load.derived import WorkOf, add_throughput, fill_metrics

#: JSON files in results folders that describe results but hold none.
BOOKKEEPING = {"benchmarks.json", "machine.json", "calibration.json"}
DEFAULT_PATHS = ("results",)


def result_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every results file under `paths` (files as given; folders searched recursively,
    hidden folders such as asv's environments skipped), each once. A symlink that leads
    nowhere or to itself is skipped with a ResultsWarning naming it."""
    found: dict[Path, None] = {}
    for path in map(Path, paths):
        if path.is_dir():
            candidates = sorted(p for pattern in ("*.jsonl", "*.json") for p in path.rglob(pattern)
                                if p.name not in BOOKKEEPING and not ResultsStore.is_run_summary(p)
                                and not any(part.startswith(".") for part in p.relative_to(path).parts))
        elif path.exists():
            candidates = [path]
        else:
            problem = "a symlink that leads nowhere (or to itself)" if path.is_symlink() else "no such file or folder"
            warnings.warn(f"{path}: {problem}; skipped", ResultsWarning, stacklevel=3)
            continue
        for candidate in candidates:
            resolved = _resolved(candidate)
            if resolved is not None:
                found[resolved] = None
    return list(found)


def _resolved(path: Path) -> Path | None:
    """The real path of a results file; None, with a ResultsWarning, for a symlink loop or one
    that leads nowhere (pathlib raises RuntimeError on a loop)."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError) as error:
        problem = getattr(error, "strerror", None) or "a symlink loop"
        warnings.warn(f"{path}: cannot read ({problem}); skipped", ResultsWarning, stacklevel=4)
        return None
    return resolved


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return parbench.rows(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        warnings.warn(f"{path}: not readable as JSON ({type(error).__name__}: {str(error)[:120]}); skipped",
                      ResultsWarning, stacklevel=3)
        return iter(())
    if asv.is_asv_results(data):
        return asv.rows(path, data)
    if pytest_benchmark.is_pytest_benchmark(data):
        return pytest_benchmark.rows(path, data)
    warnings.warn(f"{path}: neither parbench records, asv results nor pytest-benchmark JSON; skipped",
                  ResultsWarning, stacklevel=3)
    return iter(())


def _file_rows(path: Path) -> list[dict[str, Any]]:
    try:
        return list(_rows(path))
    except (KeyError, ValueError, TypeError, AttributeError, IndexError) as error:
        warnings.warn(f"{path}: malformed results ({type(error).__name__}: {str(error)[:120]}); skipped",
                      ResultsWarning, stacklevel=3)
        return []


def load_results(paths: str | Path | Iterable[str | Path] = DEFAULT_PATHS,
                 work_of: WorkOf | None = None) -> pd.DataFrame:
    """One tidy row per stored measurement (or unavailable/failed case) found under `paths`.

    Columns and their meaning: `suites.report.load.columns.COLUMNS`. Results of many machines and
    all three front ends load together; the same record reached twice counts once. `work_of`
    gives a case's analytic work, from which asv and pytest-benchmark rows' metrics are
    recomputed (`suites.report.load.derived.fill_metrics`); `suites.load_results` gives it, and
    adds each row's `comparable` / `why_not` flags (`suites.report.analyses.comparability.flag`),
    as a report's `ReportFrame` does.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    return load_files(result_files(paths), work_of)


def load_files(files: Iterable[Path], work_of: WorkOf | None = None) -> pd.DataFrame:
    """`load_results` of files already found by `result_files`: a caller that needs the file
    list too searches the paths, and warns about a missing one, only once."""
    frame = _tidy_in_batches(files)
    frame = frame.drop_duplicates(subset=["source", "machine", "run_id", "case_id", "timestamp"])
    frame = add_throughput(fill_metrics(frame, work_of))
    return frame.sort_values(["workload", "params", "machine", "timestamp"], kind="stable").reset_index(drop=True)


#: Rows parsed into Python dicts before they become a frame: a fleet's records as dicts take ~20x
#: the frame's memory (1,000 machines: 2 GB of dicts for a 200 MB frame), so they are tidied in
#: batches and only the frames are kept.
BATCH_ROWS = 2_000


def _tidy_in_batches(files: Iterable[Path]) -> pd.DataFrame:
    frames, batch = [], []
    for path in files:
        batch.extend(_file_rows(path))
        if len(batch) >= BATCH_ROWS:
            frames.append(tidy(batch))
            batch = []
    if batch or not frames:
        frames.append(tidy(batch))
    return frames[0] if len(frames) == 1 else retidy(pd.concat(frames, ignore_index=True))
