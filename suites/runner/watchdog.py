"""A case's process ends with its launcher, and at its case's deadline, whatever its case is doing.

The launcher starts each process of a case (a rank, an isolated worker) in a session of its own,
so that it can stop the process's whole group at the deadline (`suites.runner.launchers`) and a
Ctrl-C at the terminal reaches parbench alone. The cost: a launcher killed outright (`kill -9`,
the OOM killer) stops nothing, and its processes ran on with their parent gone: after `kill -9`
of parbench during a DDP case whose model hangs, both ranks still ran 140 s later, past the
case's 40 s limit, holding cores or GPU memory, with the launcher's temp folder left behind.

So each process watches for itself, in a daemon thread that polls (`POLL_S`) whether its parent
is still the launcher that started it (a process whose parent dies is handed to init or a
subreaper) and whether the case's deadline has passed by more than the launcher's own stopping
takes (`SELF_STOP_MARGIN_S`: the launcher, while alive, always stops it first and keeps its
stacks). Either way it says so in one line on stderr (with its threads' stacks at a deadline),
removes its temp folders (the launcher's, named by `--launcher`, and the process's own
`run_temp_dir`) and ends its process group (the case's own subprocesses with it) or, where the
group is not its own (a worker under torchrun shares torchrun's), itself.

The launcher names itself on the process's command line (`--launcher PID:FOLDER`, not in the
environment, which the process's own processes would inherit), so that a launcher gone before
the process began to watch is caught too; a worker started otherwise (under torchrun, srun or by
hand) watches the parent it started with. Polling rather than the
kernel's parent-death signal: a signal would kill the process before it removes anything, and
the signal follows the launcher's *thread* that started the process, not the launcher. The
thread needs the GIL for a moment each poll, which a hang in a framework's C++ (a collective, a
kernel) releases.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from suites.measure.scratch import PREFIX as RUN_TEMP_PREFIX, run_folder_of

#: The worker option a launcher names itself by (`suites.runner.case_process`).
LAUNCHER_OPTION = "--launcher"
#: Seconds between two looks at the parent and the clock.
POLL_S = 0.25
#: How long past its case's deadline a process waits for its launcher to stop it before it ends
#: itself: the launcher's stopping takes `STACKS_WAIT_S` + `GRACE_S` (SIGTERM) + `GRACE_S`
#: (SIGKILL) at most, 11 s (`tests/test_rank_watchdog.py` holds the two together).
SELF_STOP_MARGIN_S = 15.0
#: The name of the thread that keeps the watch.
THREAD_NAME = "parbench-watchdog"
#: The exit status of a process that ended itself (as `timeout` exits), where its group is not its own.
SELF_STOP_EXIT = 124


def launcher_args(folder: Path) -> list[str]:
    """What a launcher adds to the command line of each process it starts: its process id and its
    temp folder, which the process removes should the launcher be gone."""
    return [LAUNCHER_OPTION, f"{os.getpid()}:{folder}"]


def parse_launcher(value: str) -> tuple[int, Path | None]:
    """`--launcher PID:FOLDER` (FOLDER may be left out); ArgumentTypeError naming the option otherwise."""
    pid, _, folder = value.partition(":")
    if not pid.isdigit() or int(pid) < 1:
        raise argparse.ArgumentTypeError(f"{LAUNCHER_OPTION} {value!r} is not valid: expected PID:FOLDER, the "
                                         f"process id (a whole number >= 1) and temp folder of the launcher")
    return int(pid), Path(folder) if folder else None


@dataclass
class Watch:
    """What a process watches: the parent it must keep, the deadline it must end by (on `clock`,
    None until known), and the launcher's temp folder (None: no launcher of parbench's)."""

    parent: int
    launcher_folder: Path | None = None
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic
    parent_now: Callable[[], int] = os.getppid
    #: The case's deadline in seconds, for the message.
    limit_s: float | None = field(default=None, repr=False)
    #: Set when the process's case is over (`watching`): a worker run inside another process (a
    #: test, a tool) must not end that process later.
    stopped: bool = False

    def expire_after(self, limit_s: float) -> None:
        """End the process `limit_s` (the case's deadline) + `SELF_STOP_MARGIN_S` from now."""
        self.limit_s = limit_s
        self.deadline = self.clock() + limit_s + SELF_STOP_MARGIN_S

    def why_end(self) -> str | None:
        """Why the process must end now, or None."""
        if self.parent_now() != self.parent:
            return f"its launcher (process {self.parent}) is gone"
        if self.deadline is not None and self.clock() >= self.deadline:
            return (f"not finished {SELF_STOP_MARGIN_S:g} s past its case's {self.limit_s:g} s limit, and its "
                    f"launcher did not stop it")
        return None


def watch_for(launcher: tuple[int, Path | None] | None) -> Watch:
    """This process's watch: the `launcher` it was told of (`parse_launcher`), else the parent it
    has now."""
    if launcher is None:
        return Watch(os.getppid())
    pid, folder = launcher
    return Watch(pid, folder)


def remove_temp_folders(watch: Watch, launcher_gone: bool) -> None:
    """This process's own run folder (`run_temp_dir`); where the launcher is gone, its temp folder
    too, and the launcher's own run folder where that holds it (alive, the launcher reads its other
    processes' outcomes there and removes it itself)."""
    own = tempfile.tempdir
    folders = [Path(own)] if own and Path(own).name.startswith(RUN_TEMP_PREFIX) else []
    if launcher_gone and watch.launcher_folder is not None:
        folders.append(watch.launcher_folder)
        if run_folder_of(watch.parent, watch.launcher_folder.parent):
            folders.append(watch.launcher_folder.parent)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def end_process(watch: Watch, reason: str) -> None:
    """Say why, keep the stacks of a hang, remove the temp folders, and end the process's group where
    it leads one of its own (its launcher started it so), else the process. Never returns."""
    print(f"parbench worker: {reason}: ending", file=sys.stderr, flush=True)
    launcher_gone = watch.parent_now() != watch.parent
    if not launcher_gone:  # its deadline: where it hung, in the log
        faulthandler.dump_traceback(all_threads=True)
    remove_temp_folders(watch, launcher_gone)
    if os.getsid(0) == os.getpid():
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os._exit(SELF_STOP_EXIT)


def keep(watch: Watch, end: Callable[[Watch, str], None] = end_process,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Look at the watch every `POLL_S` until it says the process must end, then `end` it; return
    once it is stopped."""
    while not watch.stopped:
        reason = watch.why_end()
        if reason is not None and not watch.stopped:
            end(watch, reason)
            return
        sleep(POLL_S)


@contextlib.contextmanager
def watching(watch: Watch) -> Iterator[Watch]:
    """Keep `watch` in a daemon thread for the block (whose caller sets its deadline once it knows
    the case); the thread stops when the block ends, however it ends."""
    threading.Thread(target=keep, args=(watch,), name=THREAD_NAME, daemon=True).start()
    try:
        yield watch
    finally:
        watch.stopped = True
