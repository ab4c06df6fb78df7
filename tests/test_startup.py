"""A signal while the `parbench` command starts (issue 43: a raw KeyboardInterrupt from inside an
import, a SIGTERM that ended the process without a word): one line and the shell's exit code, and
only in the `parbench` process; a program that imports the package keeps its own handling."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from suites import startup

REPO = Path(__file__).resolve().parent.parent
AS_PARBENCH = "import sys; sys.argv[0] = '/usr/bin/parbench'; "


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("argv, orig_argv, expected", [
    (["/usr/local/bin/parbench", "run"], ["python", "/usr/local/bin/parbench", "run"], True),
    (["-m"], ["python3", "-m", "suites", "list"], True),
    (["-m"], ["python3", "-X", "importtime", "-msuites", "list"], True),
    (["-m"], ["python3", "-m", "pytest", "tests"], False),
    (["/usr/bin/pytest", "-q"], ["python", "/usr/bin/pytest", "-q"], False),
    (["-c"], ["python", "-c", "import suites"], False),
    ([], [], False),
])
def test_only_the_parbench_command_is_guarded(argv: list[str], orig_argv: list[str], expected: bool) -> None:
    assert startup.invoked_as_cli(argv, orig_argv) is expected


def test_a_ctrl_c_while_the_package_loads_is_one_line_and_130() -> None:
    done = python(AS_PARBENCH + "import suites; raise KeyboardInterrupt")
    assert done.returncode == 130
    assert done.stderr == "parbench: interrupted before the command began; nothing was run\n"


@pytest.mark.parametrize("name, code", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_terminating_signal_while_it_starts_is_one_line_and_its_code(name: str, code: int) -> None:
    done = python(AS_PARBENCH + f"import os, signal, time, suites; os.kill(os.getpid(), signal.{name}); "
                                "time.sleep(30)")
    assert done.returncode == code
    assert done.stderr == f"parbench: stopped by {name} before the command began; nothing was run\n"


def test_an_ignored_signal_stays_ignored() -> None:
    """`nohup parbench run ...`: SIGHUP ignored before parbench started is not turned into an ending."""
    done = python("import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN); " + AS_PARBENCH
                  + "import os, suites; os.kill(os.getpid(), signal.SIGHUP); print('still here')")
    assert (done.returncode, done.stdout, done.stderr) == (0, "still here\n", "")


def test_an_importing_program_keeps_its_own_handling() -> None:
    done = python("import signal, sys, suites; print(sys.excepthook is sys.__excepthook__, "
                  "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)")
    assert done.stdout.split() == ["True", "True"]


def test_the_command_takes_over_and_other_errors_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed, an exception other than Ctrl-C still reaches the previous hook; released, the
    hook and handlers are what they were (the front end's own handling follows)."""
    seen: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, value, tb: seen.append(kind))
    monkeypatch.setattr(sys, "argv", ["/usr/bin/parbench", "list"])
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
