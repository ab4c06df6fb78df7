"""A run's own temp folder, removed when the run ends.

TensorFlow's autograph writes each function it converts to `__autograph_generated_file*.py` in
the system temp folder and never deletes it (118 after a few suites). Inside `run_temp_dir`
Python's `tempfile` (which autograph uses) and every process started from here (`TMPDIR`: rank
and worker processes) write into a fresh folder instead, which is removed on the way out.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

TMPDIR_ENV = "TMPDIR"
PREFIX = "parbench-run-"


@contextlib.contextmanager
def run_temp_dir() -> Iterator[Path]:
    """A fresh folder (in the current temp folder) that is the temp folder for the duration, named
    for this process (`run_folder_of`)."""
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    previous_env, previous_tempdir = os.environ.get(TMPDIR_ENV), tempfile.tempdir
    os.environ[TMPDIR_ENV] = tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = previous_tempdir
        if previous_env is None:
            os.environ.pop(TMPDIR_ENV, None)
        else:
            os.environ[TMPDIR_ENV] = previous_env
        shutil.rmtree(folder, ignore_errors=True)


def run_folder_of(pid: int, folder: Path) -> bool:
    """Whether `folder` is the run folder process `pid` made: what a process of a case removes for
    its launcher once the launcher is gone (`suites.runner.watchdog`)."""
    return folder.name.startswith(f"{PREFIX}{pid}-")


def shared_temp_dir() -> Path:
    """The temp folder outside every run's own folder: where processes that were started apart
    (the tasks of a TF cluster, each a worker with its own run folder, or started by hand) leave
    files for each other."""
    folder = Path(tempfile.gettempdir())
    while folder.name.startswith(PREFIX) and folder.parent != folder:
        folder = folder.parent
    return folder
