"""The results store: append-only JSON Lines, one record per line, safe under kill and concurrency.

Every record is written with one `write` on an O_APPEND descriptor under an exclusive lock,
then flushed and fsync'ed: killing a run at any moment leaves every finished record intact,
and two runs appending to the same file interleave whole lines, never parts of them. A file
left ending in a partial line (a machine that died mid-write, a full disk) gets a newline
before the next record, so the torn line costs only itself.
Loading is data-only (json), skips a corrupt line with a warning naming file and line.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import warnings
from pathlib import Path
from typing import Iterable, Iterator

from suites.errors import UserError
from suites.knobs import MAX_LABEL_CHARS
from suites.records.record import Record
from suites.records.run_summary import RunSummary

DEFAULT_RESULTS_DIR = Path("results")
RECORDS_SUBDIR = "parbench"
#: Under RECORDS_SUBDIR: one `<run_id>.json` per `parbench run` (`suites.records.run_summary`).
RUNS_SUBDIR = "runs"


class ResultsWarning(UserWarning):
    """A results file or line that could not be read; the rest still loads."""


def _safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._")[:MAX_LABEL_CHARS] or "machine"


class ResultsStore:
    def __init__(self, root: Path | str = DEFAULT_RESULTS_DIR) -> None:
        self.root = Path(root)
        self.directory = self.root / RECORDS_SUBDIR

    def ensure_writable(self) -> None:
        """Fail before anything is measured if records could not be stored."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"cannot create results directory {self.directory}: {error.strerror}; "
                            f"pass --results DIR with a writable directory") from None
        if not os.access(self.directory, os.W_OK):
            raise UserError(f"results directory {self.directory} is not writable; "
                            f"pass --results DIR with a writable directory")

    def path_for(self, machine: str) -> Path:
        return self.directory / f"records-{_safe_name(machine)}.jsonl"

    def append(self, record: Record) -> Path:
        path = self.path_for(record.machine)
        line = (json.dumps(record.to_dict(), allow_nan=True) + "\n").encode()
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _ends_in_partial_line(fd):
                warnings.warn(f"{path} ends in a partial line (a write cut short); the new record starts on "
                              f"a line of its own and the partial line is skipped when loading",
                              ResultsWarning, stacklevel=2)
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock
        return path

    def save_run_summary(self, summary: RunSummary) -> Path:
        """Write the run's summary whole (a temporary file renamed over it)."""
        folder = self.directory / RUNS_SUBDIR
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{_safe_name(summary.run_id)}.json"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(summary.to_dict(), indent=1))
        tmp.replace(path)
        return path

    @staticmethod
    def is_run_summary(path: Path) -> bool:
        """Whether `path` is a run's summary (bookkeeping, no results) in a store's folder."""
        return path.parent.name == RUNS_SUBDIR and path.parent.parent.name == RECORDS_SUBDIR

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("*.jsonl")) if self.directory.is_dir() else []

    def load(self) -> list[Record]:
        return list(load_records(self.files()))


def _ends_in_partial_line(fd: int) -> bool:
    """Whether the file is non-empty and its last byte is not a newline."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def load_records(paths: Iterable[Path]) -> Iterator[Record]:
    """Records from JSON Lines files; a bad line is skipped with a ResultsWarning."""
    for path in paths:
        try:
            handle = open(path, encoding="utf-8", errors="replace")
        except OSError as error:
            warnings.warn(f"{path}: cannot read ({error.strerror}); skipped", ResultsWarning, stacklevel=2)
            continue
        with handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield Record.from_dict(json.loads(line))
                except (ValueError, KeyError, TypeError, AttributeError) as error:
                    warnings.warn(f"{path}:{number}: not a parbench record ({type(error).__name__}: "
                                  f"{str(error)[:120]}); line skipped", ResultsWarning, stacklevel=2)
