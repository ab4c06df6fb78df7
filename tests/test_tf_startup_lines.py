"""TF's start-up lines stay out of parbench's output; TF's errors do not (issue #36, item 5).

TF 2.21 prints "WARNING: All log messages before absl::InitializeLog() ..." and "oneDNN custom
operations are on ..." (twice) while it loads, whatever TF_CPP_MIN_LOG_LEVEL says:
`suites.frameworks.tf.environment.quiet_import` holds stderr while TF loads and writes back what
the level lets through.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from suites.frameworks.tf import environment

pytest.importorskip("tensorflow")

BANNER = "All log messages before absl::InitializeLog()"
ONEDNN = "oneDNN custom operations are on"

INFO = ("I0000 00:00:1795666393.063387   15313 port.cc:153] oneDNN custom operations are on. "
        "You may see slightly different numerical results.\n")
WARNING = "W0512 14:03:07.000001    42 some_file.cc:7] a warning\n"
ERROR = "E0000 00:00:1795666393.100000   15313 cuda_dnn.cc:8] could not create cudnn handle\n"
TF_ERROR = "2026-05-12 14:03:07.123456: E tensorflow/core/foo.cc:12] an error in TF's own format\n"
PYTHON = "Traceback (most recent call last):\nImportError: something real\n"


def _without_log_level() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the default a user gets (conftest sets it for the tests)
    return env


def test_devices_prints_none_of_tfs_startup_lines():
    result = subprocess.run([sys.executable, "-m", "suites", "devices"], capture_output=True,
                            text=True, timeout=300, env=_without_log_level())
    assert result.returncode == 0, result.stderr
    assert "tf" in result.stdout  # TF was loaded: its devices are listed
    for output in (result.stdout, result.stderr):
        assert BANNER not in output
        assert ONEDNN not in output


def test_a_user_who_asks_for_every_line_gets_them():
    env = {**_without_log_level(), "TF_CPP_MIN_LOG_LEVEL": "0"}
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)  # "0" would stop the line this test looks for
    result = subprocess.run([sys.executable, "-c", "from suites.frameworks.tf import backend"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert ONEDNN in result.stderr  # TF 2.21 on x86-64 prints it: the test above is not vacuous


def test_the_filter_drops_lines_below_the_level_and_keeps_the_rest():
    text = environment.ABSL_PRE_INIT_BANNER + "\n" + INFO + WARNING + ERROR + TF_ERROR + PYTHON
    assert environment.filter_startup_lines(text, 2) == ERROR + TF_ERROR + PYTHON
    assert environment.filter_startup_lines(text, 1) == WARNING + ERROR + TF_ERROR + PYTHON
    assert environment.filter_startup_lines(text, 3) == PYTHON
    assert environment.filter_startup_lines(text, 0) == text


def test_quiet_import_writes_back_errors_and_python_output(capfd, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    with pytest.raises(ImportError):
        with environment.quiet_import():
            os.write(2, (environment.ABSL_PRE_INIT_BANNER + "\n" + INFO + ERROR).encode())
            sys.stderr.write("a Python warning\n")
            raise ImportError("TF failed to load")
    err = capfd.readouterr().err
    assert ERROR in err and "a Python warning" in err
    assert ONEDNN not in err and BANNER not in err
    os.write(2, b"after\n")  # stderr is back where it was
    assert capfd.readouterr().err == "after\n"


def test_the_environment_tf_processes_get():
    env = _without_log_level()
    code = "import os; from suites.frameworks.tf import environment; environment.apply_defaults(); " \
           "print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.strip() == "2"
    env["TF_CPP_MIN_LOG_LEVEL"] = "1"  # the user's own setting wins
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.strip() == "1"
