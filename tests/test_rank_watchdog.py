"""Nothing outlives its parent (issue 43, item 3): after `kill -9` of parbench during a DDP case
whose model hangs, both ranks still ran 140 s later, past the case's 40 s limit, with their temp
folder left. Each process of a case now watches its launcher and its deadline
(`suites.runner.watchdog`): the rules with fakes, and once for real with a launcher killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suites.runner import launchers, watchdog
from suites.runner.watchdog import SELF_STOP_MARGIN_S, Watch
from tests.processes import mark_processes, wait_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_process_whose_launcher_is_gone_ends_at_the_next_look():
    parents = iter([4242, 4242, 4242, 1])  # then handed to init
    watch = Watch(4242, parent_now=lambda: next(parents))
    looks, ended = [], []
    watchdog.keep(watch, end=lambda w, reason: ended.append(reason), sleep=looks.append)
    assert ended == ["its launcher (process 4242) is gone"]
    assert looks == [watchdog.POLL_S] * 3


def test_it_ends_itself_past_its_deadline_by_the_launchers_stopping_time_and_not_before():
    clock = FakeClock()
    watch = Watch(os.getppid(), clock=clock)
    assert watch.why_end() is None  # no deadline known yet: the case is still being read
    watch.expire_after(40.0)
    clock.now += 40.0 + SELF_STOP_MARGIN_S - 0.01
    assert watch.why_end() is None
    clock.now += 0.01
    assert watch.why_end() == (f"not finished {SELF_STOP_MARGIN_S:g} s past its case's 40 s limit, and its "
                               "launcher did not stop it")


def test_a_watch_is_stopped_when_its_case_is_over_and_a_stopped_watch_ends_nothing():
    alive = Watch(os.getppid())  # no deadline: the thread finds nothing to end meanwhile
    with watchdog.watching(alive):
        pass  # the worker's case ended (returned, or raised SystemExit)
    assert alive.stopped
    clock = FakeClock()
    over = Watch(os.getppid(), clock=clock, stopped=True)
    over.expire_after(1.0)
    clock.now += 3600.0
    ended: list[str] = []
    watchdog.keep(over, end=lambda w, reason: ended.append(reason), sleep=lambda s: None)
    assert ended == []


def test_a_worker_run_inside_another_process_leaves_no_watchdog_behind(monkeypatch, tmp_path):
    """`parbench worker` run in a test's (or a tool's) process: its watch must not end that process
    once the case's deadline has passed."""
    import threading

    from suites.cases.vocabulary import Status
    from suites.runner import case_process
    from suites.runner.execute import Outcome

    monkeypatch.setattr(case_process, "_serve_or_execute", lambda job, timing: (False, Outcome(Status.OK, "")))
    monkeypatch.setattr(case_process, "faulthandler", type("NoStacks", (), {
        "register": staticmethod(lambda *a, **k: None), "enable": staticmethod(lambda *a, **k: None)}))
    with pytest.raises(SystemExit) as exited:
        case_process.main(["--case", "matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8", "--out", str(tmp_path / "o.json")])
    assert exited.value.code == 0
    assert wait_for(lambda: all(thread.name != watchdog.THREAD_NAME for thread in threading.enumerate()), 30)


def test_a_living_launcher_always_stops_a_hung_process_first_and_keeps_its_stacks():
    """The launcher dumps the stacks, then SIGTERMs, then SIGKILLs after a grace each: all of it
    inside the margin, so a process never ends itself under a launcher that is still there."""
    assert launchers.STACKS_WAIT_S + 2 * launchers.GRACE_S < SELF_STOP_MARGIN_S


def test_a_launcher_gone_before_the_watch_began_is_caught_at_once(tmp_path):
    gone = os.getppid() + 100000
    watch = watchdog.watch_for(watchdog.parse_launcher(f"{gone}:{tmp_path}"))
    assert watch.launcher_folder == tmp_path
    assert watch.why_end() == f"its launcher (process {gone}) is gone"


def test_a_worker_not_started_by_parbench_watches_the_parent_it_started_with():
    watch = watchdog.watch_for(None)  # under torchrun or srun: their agent
    assert (watch.parent, watch.launcher_folder, watch.why_end()) == (os.getppid(), None, None)


def test_the_launcher_names_itself_to_the_worker_and_a_bad_name_is_one_line(tmp_path, capsys):
    from suites.runner.case_process import main

    args = watchdog.launcher_args(tmp_path)
    assert args == ["--launcher", f"{os.getpid()}:{tmp_path}"]
    assert watchdog.parse_launcher(args[1]) == (os.getpid(), tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["--case", "{}", "--out", str(tmp_path / "out.json"), "--launcher", "parbench"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "parbench worker: error: argument --launcher: --launcher 'parbench' is not valid: expected PID:FOLDER, "
        "the process id (a whole number >= 1) and temp folder of the launcher")


def test_the_launchers_folders_are_removed_only_once_it_is_gone(monkeypatch, tmp_path):
    launcher_run = tmp_path / "parbench-run-4242-abc"  # the launcher's own run folder (pid 4242)
    launcher = launcher_run / "parbench-launch"
    own = launcher / "parbench-run-5151-def"
    own.mkdir(parents=True)
    (launcher / "rank1.json").write_text("{}")  # a peer's outcome, which a living launcher reads
    monkeypatch.setattr("tempfile.tempdir", str(own))
    watch = Watch(4242, launcher)
    watchdog.remove_temp_folders(watch, launcher_gone=False)
    assert not own.exists() and (launcher / "rank1.json").exists()
    watchdog.remove_temp_folders(watch, launcher_gone=True)
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_of_another_process_is_kept(monkeypatch, tmp_path):
    other = tmp_path / "parbench-run-777-abc"  # a living process's, say: not the launcher's
    (other / "parbench-launch").mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", None)
    watchdog.remove_temp_folders(Watch(4242, other / "parbench-launch"), launcher_gone=True)
    assert list(tmp_path.iterdir()) == [other] and list(other.iterdir()) == []


def test_a_folder_that_is_not_a_run_folder_is_never_removed(monkeypatch, tmp_path):
    """Under torchrun the temp folder may be the user's own ($TMPDIR): only parbench's run folder goes."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    watchdog.remove_temp_folders(Watch(1), launcher_gone=True)
    assert tmp_path.exists()


#: A launcher that starts one watching process (which starts a child of its own, as a rank's
#: data loader would) and then hangs, as parbench did when it was killed.
LAUNCHER = textwrap.dedent("""
    import subprocess, sys, tempfile, time
    from pathlib import Path
    from suites.measure.scratch import run_temp_dir
    from suites.runner.watchdog import launcher_args
    with run_temp_dir():
        folder = Path(tempfile.mkdtemp(prefix="parbench-"))
        (folder / "rank0.log").write_text("")
        rank = subprocess.Popen([sys.executable, "-c", sys.argv[1], *launcher_args(folder)], start_new_session=True)
        print(rank.pid, flush=True)
        time.sleep(600)
""")
RANK = textwrap.dedent("""
    import subprocess, sys, time
    from suites.measure.scratch import run_temp_dir
    from suites.runner import watchdog
    with watchdog.watching(watchdog.watch_for(watchdog.parse_launcher(sys.argv[2]))), run_temp_dir():
        child = subprocess.Popen(["sleep", "600"])
        time.sleep(600)
""")


def test_kill_9_of_the_launcher_ends_its_process_and_its_children_and_removes_its_folder(tmp_path, monkeypatch):
    alive = mark_processes(monkeypatch)
    temp = tmp_path / "tmp"
    temp.mkdir()
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, RANK], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(Path.cwd()), "TMPDIR": str(temp)})
    try:
        rank = int(launcher.stdout.readline())
        assert wait_for(lambda: len(alive()) == 3, 60), "the rank and its child never started"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        # generous: the rank looks every POLL_S, but another process may keep both cores busy
        assert wait_for(lambda: not alive(), 60), f"processes left running: {alive()} (rank {rank})"
        assert list(temp.iterdir()) == [], "temp folders left behind"
    finally:
        for pid in alive():
            os.kill(pid, signal.SIGKILL)


#: A process that hangs past its (shortened) deadline, as a rank whose model hangs under torchrun.
HANGS = textwrap.dedent("""
    import time
    from suites.runner import watchdog
    watchdog.SELF_STOP_MARGIN_S = 0.0  # the launcher's stopping time, left out here
    with watchdog.watching(watchdog.watch_for(None)) as watch:
        watch.expire_after(0.2)
        time.sleep(600)
""")


def test_past_its_deadline_a_process_keeps_its_stacks_and_ends_itself():
    hung = subprocess.run([sys.executable, "-c", HANGS], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path.cwd())}, start_new_session=True)
    assert hung.returncode == -signal.SIGKILL  # its group: itself and what it started
    assert hung.stderr.startswith("parbench worker: not finished 0 s past its case's 0.2 s limit, and its launcher "
                                  "did not stop it: ending\n")
    assert "in <module>" in hung.stderr  # where it hung: its main thread's stack
