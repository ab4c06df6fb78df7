"""A Ctrl-C, SIGTERM or SIGHUP while the `parbench` command is still starting: one line, not a traceback.

From `cli.main` on, the front end says in one line what a signal stopped. Before it, Python and the
package's first modules load (about 0.1 s, more on a busy machine): a Ctrl-C there was Python's
KeyboardInterrupt traceback from inside some import, and a SIGTERM or SIGHUP ended the process
without a word. `suites/__init__` calls `guard_startup()` first thing; only when this process is
the `parbench` command (its console script, or `python -m suites`, as the interpreter was started)
does it install anything, so a program, a test or a multiprocessing child that imports the package
keeps its own signal handling. What it installs lasts
until `cli.main` takes over (`release()`): nothing has run yet, so there is nothing to clean up,
and the process ends at once with the shell's code for the signal. A signal during the
interpreter's own start, before any parbench code runs, is Python's alone.
"""
from __future__ import annotations

import os
import signal
import sys
from types import FrameType, TracebackType

#: The line said for a signal before the command began.
LINE = "parbench: {what} before the command began; nothing was run"
STARTUP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class _Installed:
    hook = None  # the excepthook in place before ours
    handlers: dict[int, object] = {}
    pid = 0  # the process that installed them: a forked child inherits them, and is not it


#: Interpreter options that take the next argument as their value (`python -X importtime -m suites`).
VALUE_OPTIONS = ("-X", "-W")


def invoked_as_cli(orig_argv: list[str] | None = None) -> bool:
    """Whether this process is the `parbench` command, from the command line the interpreter was
    given (`sys.orig_argv`): its console script (`python .../parbench ...`) or `python -m suites`.
    Not a multiprocessing child, though it may import the package with `sys.argv` set to its
    parent's: spawn and forkserver start theirs with `python -c ...`."""
    args = list(getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv)[1:]
    while args:
        arg = args.pop(0)
        if arg == "-m":
            return args[:1] == ["suites"]
        if arg.startswith("-m"):
            return arg == "-msuites"
        if arg == "-c" or arg == "-":
            return False
        if arg in VALUE_OPTIONS:
            args = args[1:]
        elif not arg.startswith("-"):
            return os.path.basename(arg) == "parbench"
    return False


def _end(what: str, code: int) -> None:
    try:
        print(LINE.format(what=what), file=sys.stderr, flush=True)
    finally:
        os._exit(code)  # nothing ran: no temp folder, process or record to see to


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt) and os.getpid() == _Installed.pid:
        _end("interrupted", 128 + signal.SIGINT)
    previous = _Installed.hook or sys.__excepthook__
    previous(kind, value, tb)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _Installed.pid:  # a forked child: the default, ended by the signal
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _end(f"stopped by {signal.Signals(signum).name}", 128 + signum)


def guard_startup() -> None:
    """For the `parbench` command only: a Ctrl-C that reaches the top during start-up, and a SIGTERM
    or SIGHUP, say one line and end the process with the shell's code (130, 143, 129)."""
    if _Installed.hook is not None or not invoked_as_cli():
        return
    _Installed.hook, _Installed.pid = sys.excepthook, os.getpid()
    sys.excepthook = _excepthook
    for sig in STARTUP_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:  # an inherited SIG_IGN (nohup) stays
            _Installed.handlers[sig] = signal.signal(sig, _on_signal)


def release() -> None:
    """The front end's own handling takes over (`cli.main`): what `guard_startup` installed is undone."""
    if _Installed.hook is None:
        return
    sys.excepthook = _Installed.hook
    for sig, previous in _Installed.handlers.items():
        if signal.getsignal(sig) is _on_signal:
            signal.signal(sig, previous)
    _Installed.hook, _Installed.handlers = None, {}
