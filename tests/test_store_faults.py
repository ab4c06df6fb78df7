"""The results store on a disk that fails: a store holds whole records or none.

A write the disk cuts short (full, over quota, failing) is taken back and stops the run with one
line; every earlier record stays loadable. A records file or runs/ folder that cannot be written
is found before anything is measured. Real faults where the test runs as root (a small tmpfs, an
immutable file), faked system calls everywhere else.
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.errors import UserError
from suites.frontends.cli import main
from suites.records import store as store_module
from suites.records.check import Check
from suites.records.measurement import Measurement
from suites.records.record import Record
from suites.records.run_summary import RunSummary
from suites.records.store import ResultsStore
from suites.runner.runner import Runner

#: One GPU case: unavailable here (and skipped as unavailable on a GPU host: the run is
#: stopped at its record either way), so a run of it measures nothing.
GPU_GRID = """
[timing]
budget_s = 0.2
[[grid]]
workload = "matmul"
framework = "torch"
device = "gpu"
params = { m = 8, n = 8, k = 8 }
"""


def make_record(index: int, machine: str = "box", padding: int = 0) -> Record:
    """A record built directly (nothing measured); `padding` bytes of details make it big."""
    case = Case.make("matmul", "torch", "cpu", params={"m": 8 + index, "n": 8, "k": 8})
    return Record(case=case, status=Status.OK, run_id="r1", timestamp="2026-01-01T00:00:00+00:00",
                  suite="t", environment={"machine": machine},
                  measurement=Measurement(samples=(1e-3, 1.1e-3, 0.9e-3)), metrics={"tflops": 1.0},
                  check=Check(True, "max_rel_err", 1e-7, 1e-4), details={"padding": "x" * padding})


def stored(store: ResultsStore, count: int) -> Path:
    store.ensure_writable()
    for index in range(count):
        path = store.append(make_record(index))
    return path


def loads_cleanly(store: ResultsStore) -> list[Record]:
    """Every record of the store, failing on any warning (a partial line would warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return store.load()


def one_line(message: str) -> str:
    assert "\n" not in message
    return message


def fill(disk: Path, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on `disk`."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, free - leave))
    return filler


def test_a_record_bigger_than_the_space_left_is_taken_back_whole(tiny_disk):
    store = ResultsStore(tiny_disk / "results")
    path = stored(store, 3)
    filler = fill(tiny_disk, leave=4096)
    before = path.read_bytes()
    with pytest.raises(UserError) as raised:
        store.append(make_record(3, padding=64 * 1024))
    message = one_line(str(raised.value))
    assert str(path) in message and "--results DIR" in message
    assert "disk full" in message or "short write" in message
    assert path.read_bytes() == before
    assert [r.case for r in loads_cleanly(store)] == [make_record(i).case for i in range(3)]
    filler.unlink()  # space again: the store goes on where it was
    store.append(make_record(3, padding=64 * 1024))
    assert len(loads_cleanly(store)) == 4


def test_a_run_summary_on_a_full_disk_leaves_no_temporary_file(tiny_disk):
    store = ResultsStore(tiny_disk / "results")
    stored(store, 1)
    (store.directory / "runs").mkdir()
    fill(tiny_disk, leave=0)
    summary = RunSummary(run_id="run-1", suite="t", machine="box", started="", finished="", cases=1,
                         counts={"ok": 1}, estimate_s=1.0, elapsed_s=1.0, max_minutes=None,
                         left_out=["x" * 64 * 1024])
    with pytest.raises(UserError, match=r"disk full .*--results DIR") as raised:
        store.save_run_summary(summary)
    one_line(str(raised.value))
    assert list((store.directory / "runs").iterdir()) == []
    assert len(loads_cleanly(store)) == 1


def short_write(monkeypatch, keep: float = 0.5) -> None:
    """os.write into a records file writes only the first `keep` share of what it is given, and
    says so (a full disk's short write); every other write is left alone."""
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            data = data[:int(len(data) * keep)]
        return real(fd, data)
    monkeypatch.setattr(store_module.os, "write", write)


def test_a_short_write_is_truncated_back_and_named(results_dir, monkeypatch):
    store = ResultsStore(results_dir)
    path = stored(store, 2)
    before = path.read_bytes()
    with monkeypatch.context() as patch:
        short_write(patch)
        with pytest.raises(UserError, match=r"short write \(\d+ of \d+ bytes") as raised:
            store.append(make_record(2))
    message = one_line(str(raised.value))
    assert str(path) in message and "earlier records are intact" in message
    assert path.read_bytes() == before
    assert len(loads_cleanly(store)) == 2


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "disk full"), (errno.EDQUOT, "disk quota exceeded"),
                                         (errno.EIO, "I/O error")])
def test_a_failed_write_or_fsync_leaves_the_file_as_it_was(results_dir, monkeypatch, code, words):
    store = ResultsStore(results_dir)
    path = stored(store, 2)
    before = path.read_bytes()
    real_write = os.write

    def write_then_fail(fd: int, data: bytes) -> int:
        real_write(fd, data[:10])  # the disk took a part before it failed
        raise OSError(code, os.strerror(code))

    def fsync_fails(fd: int) -> None:
        raise OSError(code, os.strerror(code))
    for name, fake in (("write", write_then_fail), ("fsync", fsync_fails)):
        with monkeypatch.context() as patch:
            patch.setattr(store_module.os, name, fake)
            with pytest.raises(UserError, match=words) as raised:
                store.append(make_record(2))
        one_line(str(raised.value))
        assert path.read_bytes() == before, name
    assert len(loads_cleanly(store)) == 2


def test_a_run_summary_that_fails_to_write_removes_its_temporary_file(results_dir, monkeypatch):
    store = ResultsStore(results_dir)
    stored(store, 1)

    def write_text(self: Path, *args, **kwargs) -> int:
        self.touch()  # what a full disk leaves: the file, empty
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Path, "write_text", write_text)
    summary = RunSummary(run_id="run-1", suite="t", machine="box", started="", finished="", cases=1,
                         counts={"ok": 1}, estimate_s=1.0, elapsed_s=1.0, max_minutes=None, left_out=[])
    with pytest.raises(UserError, match=r"run-1\.json: disk full .*records are stored") as raised:
        store.save_run_summary(summary)
    one_line(str(raised.value))
    assert list((store.directory / "runs").iterdir()) == []


def test_a_run_stops_with_one_line_when_its_record_cannot_be_stored(tmp_path, results_dir, monkeypatch, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text(GPU_GRID)
    store = ResultsStore(results_dir)
    path = stored(store, 1)
    before = path.read_bytes()
    short_write(monkeypatch)
    code = main(["run", "--suite", str(grid), "--results", str(results_dir), "--label", "box"])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, err
    assert lines[0].startswith("parbench: error: results file ") and "short write" in lines[0]
    assert "Traceback" not in err
    assert "records in" not in out and " ok, " not in out  # nothing claims the record is stored
    assert path.read_bytes() == before
    assert not (store.directory / "runs").exists()


# --- found before anything is measured -------------------------------------------------------

@pytest.fixture
def nothing_measured(monkeypatch):
    """`parbench run` may not reach a case."""
    def run(runner, planned):
        raise AssertionError(f"{planned.case.id} ran although its record could not be stored")
    monkeypatch.setattr(Runner, "run", run)


def test_an_immutable_records_file_is_found_before_measuring(tmp_path, results_dir, capsys, nothing_measured):
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("chattr +i needs root and chattr")
    store = ResultsStore(results_dir)
    path = stored(store, 1)
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("this file system does not take chattr +i")
    try:
        assert os.access(path.parent, os.W_OK)  # the folder is writable: only the file is not
        with pytest.raises(UserError, match=f"results file {path} is not writable .*--results DIR"):
            store.ensure_writable("box")
        store.ensure_writable("other-machine")  # another machine's file is not this run's
        grid = tmp_path / "grid.toml"
        grid.write_text(GPU_GRID)
        code = main(["run", "--suite", str(grid), "--results", str(results_dir), "--label", "box"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("parbench: error: results file ") and err.count("\n") == 1, err
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_a_records_file_that_cannot_be_opened_is_found_before_measuring(tmp_path, results_dir, monkeypatch,
                                                                        capsys, nothing_measured):
    store = ResultsStore(results_dir)
    path = stored(store, 1)
    real_open = os.open

    def refuse(file, flags, *args, **kwargs):
        if Path(file) == path and flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(file))
        return real_open(file, flags, *args, **kwargs)
    monkeypatch.setattr(store_module.os, "open", refuse)
    with pytest.raises(UserError, match="is not writable .*Operation not permitted"):
        store.ensure_writable("box")
    with pytest.raises(UserError, match="cannot open it"):  # and append says so in one line too
        store.append(make_record(1))
    grid = tmp_path / "grid.toml"
    grid.write_text(GPU_GRID)
    code = main(["run", "--suite", str(grid), "--results", str(results_dir), "--label", "box"])
    err = capsys.readouterr().err
    assert code == 2 and f"results file {path} is not writable" in err and err.count("\n") == 1, err


def test_a_runs_folder_that_cannot_take_the_summary_is_found_before_measuring(results_dir, monkeypatch):
    store = ResultsStore(results_dir)
    stored(store, 1)
    runs = store.directory / "runs"
    runs.write_text("not a folder")
    with pytest.raises(UserError, match="runs is not writable"):
        store.ensure_writable("box")
    runs.unlink()
    runs.mkdir()
    real_access = os.access
    monkeypatch.setattr(store_module.os, "access",
                        lambda p, mode, **kw: False if Path(p) == runs else real_access(p, mode, **kw))
    with pytest.raises(UserError, match="runs is not writable"):
        store.ensure_writable("box")
