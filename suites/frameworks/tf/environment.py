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
from typing import Iterator, MutableMapping

from suites import knobs

#: Set in a process unless its environment already says otherwise; the processes parbench
#: starts inherit them.
DEFAULTS = {
    # Keep TF's C++ banner out of reports and terminals: 2 drops INFO and WARNING, keeps ERROR.
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # At initialisation TF otherwise maps nearly all the memory of every GPU it sees for the
    # life of the process; torch cases, DDP ranks and TF workers after it would run out.
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    # Loading libtpu locks /tmp/libtpu_lockfile for the life of the process: the parbench
    # process must leave it to the TPU probe and the TPU worker (`tpu_process_env`). What this
    # covers of TF's ways to libtpu, and what else is needed, is noted below.
    "TPU_LOAD_LIBRARY": "0",
}

# What decides whether TensorFlow loads libtpu, checked against TF 2.21:
#
# 1. The tensorflow and tensorflow-cpu wheels have no libtpu loader. In the tensorflow-cpu 2.21.0
#    checked, none of the 77 shared libraries under tensorflow/ holds the strings TPU_LOAD_LIBRARY,
#    TPU_LIBRARY_PATH, libtpu.so, FindAndLoadTpuLibrary, libtpu_lockfile or LIBTPU_INIT_ARGS, and
#    no Python file reads them. The one mention is tensorflow/tools/pip_package/setup.py:312-313:
#    only the `tensorflow_tpu` build requires the libtpu package. Those wheels never load libtpu.
# 2. The tensorflow-tpu build (the StreamExecutor route that TPUStrategy takes on TPU VMs) loads
#    it in a static initializer, when its library loads: `FindAndLoadTpuLibrary` in
#    tensorflow/core/tpu/tpu_api_dlsym_initializer.cc. The path is TPU_LIBRARY_PATH, else
#    site-packages/libtpu/libtpu.so (the libtpu wheel), else "libtpu.so" on the loader's path.
#    It is dlopen()ed first; then `TryAcquireTpuLock` (xla/stream_executor/tpu/
#    tpu_initialize_util.cc) reads TPU_LOAD_LIBRARY before anything else: "1" skips the
#    lockfile, "0" fails with "TPU_LOAD_LIBRARY=0, not loading libtpu", so no lockfile, no
#    TfTpu_Initialize and no TPU platform (ALLOW_MULTIPLE_LIBTPU_LOAD and
#    TPU_CHIPS_PER_PROCESS_BOUNDS are read only after it). TPU_LOAD_LIBRARY=0 covers this route:
#    the library is mapped but never initialised, and nothing touches the chips. Clearing
#    TPU_LIBRARY_PATH would not stop the dlopen (the wheel's path and "libtpu.so" come next), so
#    it is left alone.
# 3. Any build, at `import tensorflow` (tensorflow/__init__.py:443-446 in 2.21): the library that
#    TF_PLUGGABLE_DEVICE_LIBRARY_PATH names is loaded as a PluggableDevice / PJRT plugin
#    (`load_pluggable_device_library`), whatever TPU_LOAD_LIBRARY says: TF reads it nowhere on
#    this route. libtpu is a PJRT plugin, and the PJRT TF runtimes of v5e-class TPU VMs can
#    reach it this way. So where TPU_LOAD_LIBRARY is "0", `apply_defaults` takes a libtpu named
#    there out of the process's environment (`hold_libtpu_plugin`), and `tpu_process_env` gives
#    it back to the TPU processes.
# 4. Also at import (tensorflow/__init__.py:436-441): every library in a site-packages
#    `tensorflow-plugins` folder. No variable covers that; the libtpu wheel installs into
#    site-packages/libtpu/, not there.

#: The variable TF reads at import for a PluggableDevice (PJRT) library (route 3 above).
PLUGGABLE_DEVICE_LIBRARY = "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"
#: Where a process that keeps libtpu out holds the libtpu `PLUGGABLE_DEVICE_LIBRARY` it took out of
#: its environment, so that its TPU processes get it back (`tpu_process_env`), however deep.
HELD_PLUGGABLE_DEVICE_LIBRARY = "PARBENCH_TPU_PLUGGABLE_DEVICE_LIBRARY"

#: The environment of a process that must use the TPU (the probe, a `tpu` strategy worker) beside
#: any held libtpu plugin (`tpu_process_env`): explicit, because it inherits "0" from a parent
#: that has loaded TensorFlow. "1" makes TF load libtpu without taking its lockfile; the parbench
#: process never holds the TPU, and the probe exits before a worker starts.
TPU_PROCESS = {"TPU_LOAD_LIBRARY": "1"}


def names_libtpu(path: str) -> bool:
    """Whether a PluggableDevice path (a library, or a folder of them) is or holds libtpu."""
    path = path.strip().rstrip("/")
    if os.path.basename(path).startswith("libtpu"):
        return True
    try:
        return os.path.isdir(path) and any(name.startswith("libtpu") for name in os.listdir(path))
    except OSError:
        return False


def hold_libtpu_plugin(environ: MutableMapping[str, str]) -> bool:
    """Move a libtpu `PLUGGABLE_DEVICE_LIBRARY` out of `environ` into `HELD_PLUGGABLE_DEVICE_LIBRARY`;
    whether there was one. Another plugin stays where it is."""
    path = environ.get(PLUGGABLE_DEVICE_LIBRARY, "")
    if not path.strip() or not names_libtpu(path):
        return False
    environ[HELD_PLUGGABLE_DEVICE_LIBRARY] = environ.pop(PLUGGABLE_DEVICE_LIBRARY)
    return True


def tpu_process_env() -> dict[str, str]:
    """What a process that must use the TPU sets over the environment it inherits: `TPU_PROCESS`,
    and the libtpu plugin path a parent held (`hold_libtpu_plugin`) where one did."""
    held = knobs.read(HELD_PLUGGABLE_DEVICE_LIBRARY)
    return {**TPU_PROCESS, **({PLUGGABLE_DEVICE_LIBRARY: held} if held else {})}


def apply_defaults() -> None:
    """Put `DEFAULTS` into this process's environment where it does not set them already; then,
    where this process keeps libtpu out (TPU_LOAD_LIBRARY is "0"), hold a libtpu plugin path
    too (`hold_libtpu_plugin`), which TF would load at import whatever TPU_LOAD_LIBRARY says."""
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
    if os.environ.get("TPU_LOAD_LIBRARY", "").strip() == "0":
        hold_libtpu_plugin(os.environ)


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
