"""`load_results`: parbench, asv and pytest-benchmark results from any mix of files and folders,
as one tidy pandas DataFrame (columns: suites.report.load.columns.COLUMNS).

Files are recognised by content, not by name: JSON Lines (`.jsonl`, or gzipped `.jsonl.gz`) are
parbench records; a JSON object with commit_hash/env_name/results is an asv results file; one
with machine_info/benchmarks is pytest-benchmark's. asv's own bookkeeping (benchmarks.json,
machine.json) and parbench's calibration.json are not results and are passed over. A file that
cannot be read, is none of these or is no regular file (a FIFO would block the read forever), a
folder that holds no results file, and the sample records parbench ships (`SHIPPED_SAMPLES`, read
only where named) each cost a ResultsWarning naming them; everything else still loads.
"""
from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd

from suites.records.store import Remark, ResultsStore, ResultsWarning
from suites.report.load import asv, parbench, pytest_benchmark
from suites.report.load.columns import retidy, tidy
from suites.report.load.derived import WorkOf, add_throughput, fill_metrics

#: JSON files in results folders that describe results but hold none.
BOOKKEEPING = {"benchmarks.json", "machine.json", "calibration.json"}
DEFAULT_PATHS = ("results",)
#: What a folder is searched for: parbench records (gzipped or not), asv and pytest-benchmark JSON.
PATTERNS = ("*.jsonl", "*.jsonl.gz", "*.json")
#: The sample records parbench ships beside the user's own (`results/samples/`): read only where a
#: path names them or a file in them, never with the results folder around them, so that a report
#: is about the user's machines unless they ask for the samples as a comparison.
SHIPPED_SAMPLES = Path(__file__).resolve().parents[3] / "results" / "samples"


def result_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every results file under `paths` (files as given; folders searched recursively,
    hidden folders such as asv's environments skipped, and the shipped samples unless named),
    each once. A symlink that leads nowhere or to itself, a file that is not a regular one, a
    folder without results files and the samples passed over are each said in a ResultsWarning."""
    found: dict[Path, None] = {}
    paths = list(map(Path, paths))
    samples_named = any(_names_samples(path) for path in paths)
    for path in paths:
        if path.is_dir():
            candidates = _search(path, say_samples=not samples_named)
        elif path.exists():
            candidates = [path]
        else:
            problem = "a symlink that leads nowhere (or to itself)" if path.is_symlink() else "no such file or folder"
            warnings.warn(f"{path}: {problem}; skipped", ResultsWarning, stacklevel=3)
            continue
        for candidate in candidates:
            resolved = _resolved(candidate)
            if resolved is not None and _regular(candidate, resolved):
                found[resolved] = None
    return list(found)


def _search(folder: Path, say_samples: bool = True) -> list[Path]:
    """The results files in `folder` and below it, the shipped samples left out (said, unless
    `say_samples` is False: another path names them, so they are read after all)."""
    samples = _samples_within(folder)
    candidates = sorted(p for pattern in PATTERNS for p in folder.rglob(pattern)
                        if p.name not in BOOKKEEPING and not ResultsStore.is_run_summary(p)
                        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
                        and not (samples is not None and p.is_relative_to(samples)))
    if samples is not None and say_samples:
        warnings.warn(f"{samples}: the sample records parbench ships, read only where named (pass {samples} as "
                      f"well to compare with them); skipped", ResultsWarning, stacklevel=3)
    if not candidates:
        warnings.warn(f"{folder}: no results file in it (parbench records *.jsonl or *.jsonl.gz, asv or "
                      f"pytest-benchmark *.json); skipped", ResultsWarning, stacklevel=3)
    return candidates


def _names_samples(path: Path) -> bool:
    """Whether `path` is the shipped samples' folder or lies inside it."""
    try:
        return path.resolve().is_relative_to(SHIPPED_SAMPLES)
    except (OSError, RuntimeError):
        return False


def _samples_within(folder: Path) -> Path | None:
    """`SHIPPED_SAMPLES` as a path under `folder`, where it lies strictly inside it; else None."""
    try:
        inside = SHIPPED_SAMPLES.relative_to(folder.resolve())
    except (ValueError, OSError, RuntimeError):
        return None
    return folder / inside if inside.parts and SHIPPED_SAMPLES.is_dir() else None


def _regular(path: Path, resolved: Path) -> bool:
    """Whether `path` is a regular file; a FIFO, socket or device (whose read may block forever)
    is not, and is skipped with a ResultsWarning."""
    try:
        regular = stat.S_ISREG(os.stat(resolved).st_mode)
    except OSError as error:
        warnings.warn(f"{path}: cannot read ({error.strerror}); skipped", ResultsWarning, stacklevel=4)
        return False
    if not regular:
        warnings.warn(f"{path}: not a regular file (a FIFO, socket or device: reading it could wait forever); "
                      f"skipped", ResultsWarning, stacklevel=4)
    return regular


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


def _rows(path: Path, remark: Remark | None = None) -> Iterator[dict[str, Any]]:
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        return parbench.rows(path, remark)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is no part of the JSON
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


def _file_rows(path: Path, remark: Remark | None = None) -> list[dict[str, Any]]:
    try:
        return list(_rows(path, remark))
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
    list too searches the paths, and warns about a missing one, only once. A parbench record of
    a workload `work_of` does not know is kept, and said (`parbench.workload_remark`)."""
    frame = _tidy_in_batches(files, parbench.workload_remark(work_of))
    frame = frame.drop_duplicates(subset=["source", "machine", "run_id", "case_id", "timestamp"])
    frame = add_throughput(fill_metrics(frame, work_of))
    return frame.sort_values(["workload", "params", "machine", "timestamp"], kind="stable").reset_index(drop=True)


#: Rows parsed into Python dicts before they become a frame: a fleet's records as dicts take ~20x
#: the frame's memory (1,000 machines: 2 GB of dicts for a 200 MB frame), so they are tidied in
#: batches and only the frames are kept.
BATCH_ROWS = 2_000


def _tidy_in_batches(files: Iterable[Path], remark: Remark | None = None) -> pd.DataFrame:
    frames, batch = [], []
    for path in files:
        batch.extend(_file_rows(path, remark))
        if len(batch) >= BATCH_ROWS:
            frames.append(tidy(batch))
            batch = []
    if batch or not frames:
        frames.append(tidy(batch))
    return frames[0] if len(frames) == 1 else retidy(pd.concat(frames, ignore_index=True))
