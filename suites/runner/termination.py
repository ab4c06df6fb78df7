"""Terminating signals as exceptions, so that a stopped run cleans up as Ctrl-C does.

Python's default for SIGTERM and SIGHUP is to die on the spot: no `finally` runs, so the rank
processes a launcher started (each in a session of its own, out of reach of the signal) kept
running with their parent gone, holding CPU cores or GPU memory, and their temp folders stayed
behind. Inside `signals_raise()` either signal raises `Terminated` instead, which unwinds like
KeyboardInterrupt: every launcher's `finally` stops its processes' groups and removes its temp
folder, and the front end says in one line what was stopped. A second signal while unwinding is
ignored, so cleanup is not cut short (SIGKILL remains the hard stop).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Iterator

#: The signals that end a run cleanly. SIGINT is Python's KeyboardInterrupt already.
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """The run was asked to stop by a signal. A BaseException, as KeyboardInterrupt is, so that
    no `except Exception` on the way up (user code, a case's error handling) swallows it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum


class _State:
    """What the handler needs: whether it is installed, has raised, or is holding a signal back."""
    installed = False
    raised = False
    deferring = 0
    pending: int | None = None


def _handler(signum: int, frame: FrameType | None) -> None:
    if _State.raised:
        return
    if _State.deferring:
        _State.pending = signum
        return
    _State.raised = True
    raise Terminated(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Terminated` in the main thread (once; later
    ones are ignored while the first unwinds). Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread() or _State.installed:
        yield
        return
    previous = {sig: signal.signal(sig, _handler) for sig in TERMINATING}
    _State.installed, _State.raised, _State.pending = True, False, None
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _State.installed = False


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a terminating signal back until the block ends, then raise it: for a launcher that
    starts processes, so that a signal never lands between a child's start and the launcher's
    note of it (a child it does not know of, it cannot stop). A no-op where `signals_raise` is
    not in force."""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1
        if not _State.deferring and _State.pending is not None and not _State.raised:
            signum, _State.pending = _State.pending, None
            _State.raised = True
            raise Terminated(signum)
