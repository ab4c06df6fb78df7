"""A signal while the `parbench` command starts (issue 43: a raw KeyboardInterrupt from inside an
import, a SIGTERM that ended the process without a word): one line and the shell's exit code, and
only in the `parbench` process; a program, or a child it forks, keeps its own handling."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from suites import startup

REPO = Path(__file__).resolve().parent.parent


def as_parbench(lines: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`lines` run as the `parbench` command runs: a script of that name (its console script's)."""
    script = tmp_path / "parbench"
    script.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("orig_argv, expected", [
    (["python", "/usr/local/bin/parbench", "run"], True),
    (["/usr/bin/python3", "-I", "/usr/local/bin/parbench", "report"], True),
    (["python3", "-m", "suites", "list"], True),
    (["python3", "-X", "importtime", "-msuites", "list"], True),
    (["python3", "-m", "pytest", "tests"], False),
    (["python", "/usr/bin/pytest", "-q"], False),
    (["python", "-c", "import suites", "/usr/bin/parbench"], False),
    (["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"], False),
    (["python"], False),
])
def test_only_the_parbench_command_is_guarded(orig_argv: list[str], expected: bool) -> None:
    assert startup.invoked_as_cli(orig_argv) is expected


def test_a_ctrl_c_while_the_package_loads_is_one_line_and_130(tmp_path: Path) -> None:
    done = as_parbench(["import suites", "raise KeyboardInterrupt"], tmp_path)
    assert done.returncode == 130
    assert done.stderr == "parbench: interrupted before the command began; nothing was run\n"


@pytest.mark.parametrize("name, code", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_terminating_signal_while_it_starts_is_one_line_and_its_code(name: str, code: int, tmp_path: Path) -> None:
    done = as_parbench(["import os, signal, time, suites", f"os.kill(os.getpid(), signal.{name})", "time.sleep(30)"],
                       tmp_path)
    assert done.returncode == code
    assert done.stderr == f"parbench: stopped by {name} before the command began; nothing was run\n"


def test_an_ignored_signal_stays_ignored(tmp_path: Path) -> None:
    """`nohup parbench run ...`: SIGHUP ignored before parbench started is not turned into an ending."""
    done = as_parbench(["import os, signal", "signal.signal(signal.SIGHUP, signal.SIG_IGN)", "import suites",
                        "os.kill(os.getpid(), signal.SIGHUP)", "print('still here')"], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "still here\n", "")


def test_a_forked_child_ends_by_the_signal_without_parbenchs_line(tmp_path: Path) -> None:
    """A child forked while the guard is in place (a framework's worker) is not the command: a
    SIGTERM ends it as Python's default does, and says nothing."""
    done = as_parbench(["import os, signal, time, suites", "pid = os.fork()",
                        "if pid == 0:", "    os.kill(os.getpid(), signal.SIGTERM)", "    time.sleep(30)",
                        "    os._exit(0)", "_, status = os.waitpid(pid, 0)",
                        "print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1)"],
                       tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{int(signal.SIGTERM)}\n", "")


def test_an_importing_program_keeps_its_own_handling() -> None:
    done = subprocess.run([sys.executable, "-c", "import signal, sys, suites; print(sys.excepthook is "
                           "sys.__excepthook__, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True"]


def test_the_command_takes_over_and_other_errors_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed, an exception other than Ctrl-C still reaches the previous hook; released, the
    hook and handlers are what they were (the front end's own handling follows)."""
    seen: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, value, tb: seen.append(kind))
    monkeypatch.setattr(sys, "orig_argv", ["python", "/usr/bin/parbench", "list"])
    before = {sig: signal.getsignal(sig) for sig in startup.STARTUP_SIGNALS}
    startup.guard_startup()
    try:
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        sys.excepthook(ValueError, ValueError("x"), None)
        assert seen == [ValueError]
    finally:
        startup.release()
    assert {sig: signal.getsignal(sig) for sig in startup.STARTUP_SIGNALS} == before
    sys.excepthook(KeyError, KeyError("y"), None)
    assert seen == [ValueError, KeyError]
