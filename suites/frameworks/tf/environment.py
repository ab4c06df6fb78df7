"""The environment TensorFlow reads when it loads, for every process parbench runs it in.

TensorFlow reads these variables once, when it loads or initialises its devices, so they must be
in `os.environ` before `import tensorflow`: `suites.frameworks.tf.backend` applies them before
its own import of TensorFlow, and every module of this package that uses TensorFlow imports
`backend` first. This module imports no TensorFlow, so the launcher and the TPU probe can name a
TPU process's environment without loading it.

`TF_CPP_MIN_LOG_LEVEL` alone no longer keeps TF's start-up lines out of the output: TF 2.21
logs "oneDNN custom operations are on" through absl before absl's logging is initialised, and
absl then writes it to stderr whatever the level, after a "WARNING: All log messages before
absl::InitializeLog() is called are written to STDERR" line (twice: two of TF's libraries carry
their own absl). `quiet_import` therefore holds stderr while TF loads and writes back what the
level lets through: a line below the level is dropped, everything else (errors, Python warnings,
a traceback) is written back as it was.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

#: Set in a process unless its environment already says otherwise; the processes parbench
#: starts inherit them.
DEFAULTS = {
    # Keep TF's C++ banner out of reports and terminals: 2 drops INFO and WARNING, keeps ERROR.
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # At initialisation TF otherwise maps nearly all the memory of every GPU it sees for the
    # life of the process; torch cases, DDP ranks and TF workers after it would run out.
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    # Loading libtpu locks /tmp/libtpu_lockfile for the life of the process: the parbench
    # process must leave it to the TPU probe and the TPU worker (`TPU_PROCESS`).
    "TPU_LOAD_LIBRARY": "0",
}

#: The environment of a process that must use the TPU (the probe, a `tpu` strategy worker):
#: explicit, because it inherits "0" from a parent that has loaded TensorFlow. "1" makes TF load
#: libtpu without taking its lockfile; the parbench process never holds the TPU, and the probe
#: exits before a worker starts.
TPU_PROCESS = {"TPU_LOAD_LIBRARY": "1"}


def apply_defaults() -> None:
    """Put `DEFAULTS` into this process's environment where it does not set them already."""
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)


#: The line absl writes before the first message logged before `absl::InitializeLog()`.
ABSL_PRE_INIT_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"

#: A C++ log line's severity letter: absl's format ("I0512 14:03:07.063387   15313 port.cc:153]
#: ...", with "0000 00:00:<seconds since the epoch>" before absl is initialised) and TF's own
#: ("2024-05-01 12:00:00.123456: W tensorflow/core/...cc:42] ...").
_LOG_LINE = re.compile(r"^(?:([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\]"
                       r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) [^ \]]+:\d+\])")

#: TF_CPP_MIN_LOG_LEVEL's scale: a message is shown when its severity is at least the level.
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def min_log_level() -> int:
    """TF_CPP_MIN_LOG_LEVEL as TF reads it: an integer, 0 (show everything) when unset or not one."""
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip())
    except ValueError:
        return 0


def filter_startup_lines(text: str, level: int) -> str:
    """`text` without the C++ log lines below `level` and absl's banner (which only announces
    them); unchanged at level 0."""
    if level <= 0:
        return text
    kept = []
    for line in text.splitlines(keepends=True):
        if line.rstrip("\r\n") == ABSL_PRE_INIT_BANNER:
            continue
        match = _LOG_LINE.match(line)
        if match and _SEVERITY[match.group(1) or match.group(2)] < level:
            continue
        kept.append(line)
    return "".join(kept)


@contextlib.contextmanager
def quiet_import() -> Iterator[None]:
    """Hold file descriptor 2 while the body runs (`import tensorflow`), then write back what
    `filter_startup_lines` keeps at this process's TF_CPP_MIN_LOG_LEVEL. At level 0 (the user
    asked for everything) stderr is left alone. What is held is lost only if the process dies
    inside the body (a crash while TF loads): TF_CPP_MIN_LOG_LEVEL=0 shows such a crash's output."""
    level = min_log_level()
    held = saved = None
    if level > 0:
        try:
            held = tempfile.TemporaryFile()
            saved = os.dup(2)
        except OSError:  # no stderr to hold, or nowhere to hold it: TF prints as it does
            if held is not None:
                held.close()
            held = None
    if held is None or saved is None:
        yield
        return
    with held:
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            _flush(sys.stderr)
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = filter_startup_lines(held.read().decode("utf-8", errors="replace"), level)
            if kept:
                sys.stderr.write(kept)
                _flush(sys.stderr)


def _flush(stream) -> None:
    try:
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass
