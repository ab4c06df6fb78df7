"""The results store: append-only JSON Lines, one record per line, safe under kill and concurrency.

Every record is written with one `write` on an O_APPEND descriptor under an exclusive lock,
then flushed and fsync'ed: killing a run at any moment leaves every finished record intact,
and two runs appending to the same file interleave whole lines, never parts of them. A write
the disk cuts short (full, over quota, failing) is taken back — the file is truncated to its
size before the write, still under the lock — and the run stops with one line saying so: a
store holds whole records or none. A file left ending in a partial line anyway (a machine that
died mid-write) gets a newline before the next record, so the torn line costs only itself.
Loading is data-only (json), skips a corrupt or ill-typed line with a warning naming file and
line; every other line loads. A line whose record is sound but for a field no reader needs as
written (a stored figure its samples give again, a timestamp that is no time) is kept with that
field ignored, and said: once a file, its first such line and how many more.
"""
from __future__ import annotations

import errno
import fcntl
import gzip
import json
import math
import os
import re
import warnings
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.knobs import MAX_LABEL_CHARS
from suites.records.metric_registry import FLAGS
from suites.records.record import Record
from suites.records.run_summary import RunSummary
from suites.records.seconds import count_problem, seconds_problem

DEFAULT_RESULTS_DIR = Path("results")
RECORDS_SUBDIR = "parbench"
#: Under RECORDS_SUBDIR: one `<run_id>.json` per `parbench run` (`suites.records.run_summary`).
RUNS_SUBDIR = "runs"
#: What a failed write says, where the disk is the cause; any other OSError says its own strerror.
DISK_PROBLEMS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EIO: "I/O error",
                 errno.EFBIG: "file too large"}
WAY_OUT = "free space there or pass --results DIR on another disk"


class ResultsWarning(UserWarning):
    """A results file or line that could not be read; the rest still loads."""


def _safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._")[:MAX_LABEL_CHARS] or "machine"


class ResultsStore:
    def __init__(self, root: Path | str = DEFAULT_RESULTS_DIR) -> None:
        self.root = Path(root)
        self.directory = self.root / RECORDS_SUBDIR

    def ensure_writable(self, machine: str | None = None) -> None:
        """Fail before anything is measured if records could not be stored: the folder, its
        runs/ folder where it exists, and `machine`'s records file where it exists (a file
        made read-only or immutable would otherwise fail only once its case was measured)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"cannot create results directory {self.directory}: {error.strerror}; "
                            f"pass --results DIR with a writable directory") from None
        runs = self.directory / RUNS_SUBDIR
        for folder in (self.directory, runs):
            if folder.exists() and not (folder.is_dir() and os.access(folder, os.W_OK)):
                raise UserError(f"results directory {folder} is not writable; "
                                f"pass --results DIR with a writable directory")
        if machine is not None:
            _check_appendable(self.path_for(machine))

    def path_for(self, machine: str) -> Path:
        return self.directory / f"records-{_safe_name(machine)}.jsonl"

    def append(self, record: Record) -> Path:
        """Add `record` as one line, whole or not at all: a write the disk cuts short is taken
        back and raises a UserError; every earlier record stays as it was."""
        path = self.path_for(record.machine)
        line = (json.dumps(record.to_dict(), allow_nan=True) + "\n").encode()
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise _store_error(path, error, "cannot open it") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _ends_in_partial_line(fd):
                warnings.warn(f"{path} ends in a partial line (a write cut short); the new record starts on "
                              f"a line of its own and the partial line is skipped when loading",
                              ResultsWarning, stacklevel=2)
                line = b"\n" + line
            _write_whole(fd, path, line)
        finally:
            os.close(fd)  # closing releases the lock
        return path

    def save_run_summary(self, summary: RunSummary) -> Path:
        """Write the run's summary whole (a temporary file renamed over it); on any failure the
        temporary file is removed and an OSError becomes a UserError."""
        folder = self.directory / RUNS_SUBDIR
        path = folder / f"{_safe_name(summary.run_id)}.json"
        tmp = path.with_name(path.name + ".tmp")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(summary.to_dict(), indent=1))
            tmp.replace(path)
        except BaseException as error:
            _remove(tmp)
            if isinstance(error, OSError):
                raise _store_error(path, error, "the run's summary was not written (its records are stored)") \
                    from None
            raise
        return path

    @staticmethod
    def is_run_summary(path: Path) -> bool:
        """Whether `path` is a run's summary (bookkeeping, no results) in a store's folder."""
        return path.parent.name == RUNS_SUBDIR and path.parent.parent.name == RECORDS_SUBDIR

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("*.jsonl")) if self.directory.is_dir() else []

    def load(self) -> list[Record]:
        return list(load_records(self.files()))


def _problem(error: OSError) -> str:
    return DISK_PROBLEMS.get(error.errno or 0, error.strerror or type(error).__name__)


def _store_error(path: Path, error: OSError, what: str) -> UserError:
    if error.errno in DISK_PROBLEMS:
        return UserError(f"results file {path}: {_problem(error)} ({error.strerror}); {what}; {WAY_OUT}")
    return UserError(f"results file {path}: {error.strerror or type(error).__name__}; {what}; "
                     f"pass --results DIR with a writable directory")


def _check_appendable(path: Path) -> None:
    """Open an existing records file the way `append` does, writing nothing: whatever would
    refuse the record (mode bits, an immutable file, a read-only mount, a folder in its place)
    refuses it now, before its case is measured."""
    if not path.exists():
        return
    try:
        os.close(os.open(path, os.O_RDWR | os.O_APPEND))
    except OSError as error:
        raise UserError(f"results file {path} is not writable ({error.strerror}); make it writable or "
                        f"pass --results DIR with a writable directory") from None


def _write_whole(fd: int, path: Path, line: bytes) -> None:
    """Write `line` at the end of the locked file and fsync it; where the disk takes only part
    of it (or none), truncate the file back to its size before and raise a UserError."""
    size = os.fstat(fd).st_size
    try:
        written = os.write(fd, line)
        if written == len(line):
            os.fsync(fd)
            return
        problem = f"short write ({written} of {len(line)} bytes: the disk is probably full)"
    except OSError as error:
        problem = f"{_problem(error)} ({error.strerror})"
    try:
        os.ftruncate(fd, size)
        kept = "the record was not stored; earlier records are intact"
    except OSError:
        kept = "the record was not stored and its part could not be removed (it is skipped when loading)"
    raise UserError(f"results file {path}: {problem}; {kept}; {WAY_OUT}")


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _ends_in_partial_line(fd: int) -> bool:
    """Whether the file is non-empty and its last byte is not a newline."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def load_records(paths: Iterable[Path]) -> Iterator[Record]:
    """Records from JSON Lines files; a bad line is skipped with a ResultsWarning."""
    for path in paths:
        for _, record in numbered_records(path):
            yield record


def open_records(path: Path) -> IO[str]:
    """A records file as text: gzip-compressed where its name ends in .gz (`records.jsonl.gz`), and
    a UTF-8 byte-order mark at its start read as none (an editor's, not part of the first record)."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="replace")
    return open(path, encoding="utf-8-sig", errors="replace")


#: What a reader adds to the store's own notes on a kept record (`numbered_records`): '' or
#: what it cannot use of it, and how it reads it instead.
Remark = Callable[[Record], str]


def numbered_records(path: Path, remark: Remark | None = None) -> Iterator[tuple[int, Record]]:
    """(line number, record) of each good line of one JSON Lines file (`open_records`). A line
    that is not JSON, not a record, or a record whose fields have the wrong types or impossible
    values (`check`) is skipped with a ResultsWarning naming file and line; a file that cannot be
    read (or uncompressed), with one naming the file. A record kept with a field ignored
    (`kept_note`, then `remark` where given) is said once the file is read: one ResultsWarning
    naming its first such line and how many more."""
    try:
        handle = open_records(path)
    except OSError as error:
        warnings.warn(f"{path}: cannot read ({error.strerror}); skipped", ResultsWarning, stacklevel=3)
        return
    kept: list[tuple[int, str]] = []
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                    _check_parts(data)
                    record = Record.from_dict(data)
                    check(record)
                except (ValueError, KeyError, TypeError, AttributeError, IndexError, OverflowError,
                        RecursionError) as error:  # RecursionError: JSON nested beyond the parser's depth
                    warnings.warn(f"{path}:{number}: not a parbench record ({type(error).__name__}: "
                                  f"{str(error)[:120]}); line skipped", ResultsWarning, stacklevel=3)
                    continue
                note = kept_note(data, record) or (remark(record) if remark else "")
                if note:
                    kept.append((number, note))
                yield number, record
        except (OSError, EOFError) as error:  # a folder given as a file, a failing disk, a broken or cut gzip
            problem = getattr(error, "strerror", None) or str(error) or type(error).__name__
            warnings.warn(f"{path}: cannot read ({problem}); skipped", ResultsWarning, stacklevel=3)
    _say_kept(path, kept)


def _say_kept(path: Path, kept: list[tuple[int, str]]) -> None:
    """One ResultsWarning for a file's kept records: the first one's note, and how many more.
    'PATH: line N:', not 'PATH:N:', which the report folds as lines skipped."""
    if not kept:
        return
    (number, note), more = kept[0], len(kept) - 1
    warnings.warn(f"{path}: line {number}: {note}" + (f"; and {more} more line(s) of it likewise kept" if more else ""),
                  ResultsWarning, stacklevel=4)


# --- what a loaded record must hold: the types every reader relies on ------------------------

def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require(ok: bool, problem: str) -> None:
    if not ok:
        raise ValueError(problem)


def _optional_numbers(owner: str, data: dict[str, Any], names: Iterable[str]) -> None:
    for name in names:
        value = data.get(name)
        _require(value is None or _number(value), f"{owner}.{name} is {value!r:.40}, not a number")


#: A record's parts that are JSON objects (or null, or absent): anything else there is no record.
OBJECT_PARTS = ("case", "measurement", "check", "metrics", "details", "environment", "contention", "bound_by")


def _check_parts(data: Any) -> None:
    """Raise ValueError where a line's JSON is no object, or one of its parts is no object
    (`"environment": []` would otherwise read as an empty environment)."""
    _require(isinstance(data, dict), f"a JSON {type(data).__name__}, not an object")
    for name in OBJECT_PARTS:
        value = data.get(name)
        _require(value is None or isinstance(value, dict), f"{name} is {type(value).__name__}, not an object")


def check(record: Record) -> None:
    """Raise ValueError naming the first field of `record` that no reader can use: one line of
    a results file costs only itself, never the report of the whole file."""
    for name in ("run_id", "timestamp", "suite", "reason"):
        _require(isinstance(getattr(record, name), str), f"{name} is not text")
    for name in ("environment", "metrics", "details"):
        _require(isinstance(getattr(record, name), dict), f"{name} is {type(getattr(record, name)).__name__}, "
                                                          f"not an object")
    devices = record.case.n_devices
    _require(isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1,
             f"case.n_devices is {devices!r:.40}, not a device count (a whole number >= 1)")
    for name, value in record.case.params:
        _require(isinstance(value, (int, float, str, bool)), f"case.params.{name} is {type(value).__name__}, "
                                                             f"not a number or text")
    _optional_numbers("metrics", record.metrics, [name for name in record.metrics if name not in FLAGS])
    for name in FLAGS:
        _require(record.metrics.get(name) is None or isinstance(record.metrics[name], bool),
                 f"metrics.{name} is {record.metrics.get(name)!r:.40}, not true/false")
    if record.check is not None:
        _require(isinstance(record.check.passed, bool), f"check.passed is {record.check.passed!r:.40}, not true/false")
        _optional_numbers("check", vars(record.check), ("value", "tolerance", "check_s", "memory_bytes"))
    _require(record.status is not Status.OK or record.measurement is not None,
             "status ok without a measurement (an ok record stores the samples its figures come from)")
    if record.measurement is not None:
        _check_measurement(record.measurement)


def _check_measurement(m: Any) -> None:
    samples = m.samples
    _require(len(samples) > 0 and all(_number(s) and math.isfinite(s) and s >= 0 for s in samples),
             "measurement.samples_s is not a non-empty list of finite seconds")
    _require(m.median > 0, "measurement.samples_s: median step of 0 s (no time measured)")
    _require(_number(m.block_size) and m.block_size >= 1, f"measurement.block_size is {m.block_size!r:.40}, "
                                                          f"not a positive count")
    _require(_number(m.warmup_steps) and m.warmup_steps >= 0, "measurement.warmup_steps is not a count")
    _optional_numbers("measurement", vars(m), ("first_step_s", "timed_s", "target_rel_iqr", "recompiles"))
    _require(all(_number(t) for t in (*m.rank_medians, *m.rank_compute)),
             "measurement.rank_medians_s/rank_compute_s hold a value that is not a number")


# --- what a kept record may hold that no reader uses as written: ignored, and said -----------

#: The figures `Measurement.to_dict` stores beside the samples, for readers that do not compute
#: them: parbench's readers compute them from the samples, so a stored one that is no time is
#: ignored (and said), never used. The flags stored beside them: true, false or null.
STORED_SECONDS = ("median_s", "iqr_s", "compile_s", "sustained_step_s")
STORED_FLAGS = ("noisy", "straggler", "cut_short", "bimodal")
#: How far a stored median may be from its samples' own (float printing, an older numpy).
MEDIAN_REL_TOLERANCE = 1e-6


def kept_note(data: dict[str, Any], record: Record) -> str:
    """What a sound `record` (`check` passed) stores that cannot be used, and how it is read
    instead; '' where there is nothing to say. `data` is its line's JSON, which holds what
    `Record.from_dict` drops: the stored figures."""
    stored = stored_problem(data.get("measurement") or {}, record)
    if stored:
        return f"{stored}; that stored figure is ignored: the record is kept, its figures computed from its samples"
    timestamp = timestamp_problem(record.timestamp)
    if timestamp:
        return f"{timestamp}; the record is kept, its time unknown"
    return ""


def stored_problem(stored: dict[str, Any], record: Record) -> str:
    """Why a figure stored beside the measurement's samples is unusable: no time, no count, no
    flag, or a median its samples do not give; '' where each is usable or absent."""
    for name in STORED_SECONDS:
        problem = seconds_problem(f"measurement.{name}", stored.get(name))
        if problem:
            return problem
    problem = count_problem("measurement.n", stored.get("n"))
    if problem:
        return problem
    for name in STORED_FLAGS:
        value = stored.get(name)
        if value is not None and not isinstance(value, bool):
            return f"measurement.{name} is {value!r:.40}, not true/false"
    median = stored.get("median_s")
    if median is not None and record.measurement is not None \
            and not math.isclose(median, record.measurement.median, rel_tol=MEDIAN_REL_TOLERANCE):
        return f"measurement.median_s is {median:.6g} s, but its samples' median is {record.measurement.median:.6g} s"
    return ""


def timestamp_problem(timestamp: str) -> str:
    """Why a record's timestamp is no ISO 8601 time (as `Record` writes it); '' where it is one."""
    try:
        datetime.fromisoformat(timestamp)
    except ValueError:
        return f"timestamp {timestamp!r:.40} is not an ISO 8601 time (when the case finished)"
    return ""
