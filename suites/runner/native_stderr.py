"""What torch's C++ writes to the terminal during a call, without its c10d log blocks.

When a node of a `--nnodes` run stops (killed, interrupted, its network gone), the store client
of every other node logs the broken connection from C++ before raising it to Python: a
`[W... TCPStore.cpp:125] [c10d] recvValue failed ...` line and the 12-20 frames of the
`c10::DistNetworkError` it raises, straight to file descriptor 2, where Python cannot catch it.
The node group turns the error itself into one line naming the node and the way out
(`suites.runner.node_group`), so the block says nothing more; torch reads its log level
(`TORCH_CPP_LOG_LEVEL`) once, when it is first imported, which may be before the group exists.

`filtered` holds fd 2 in a file for the length of one call and writes back what was not such a
block: the rest of what the process (any of its threads) wrote meanwhile comes out after the call.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from typing import IO, Iterator

#: The first line of a c10 log entry: level, date, time, source (`[W1128 04:10:57.069 TCPStore.cpp:125] `).
_LOG_HEADER = re.compile(r"^\[[IWEF]\d{4} [\d:.]+ (?:\d+ )?[\w.-]+:\d+\] \[c10d\]")
#: The lines of a C++ exception's backtrace that such an entry carries, and the blank line after it.
_BACKTRACE = re.compile(r"^(?:Exception raised from |frame #\d+: |<omitting python frames>|\s*$)")


def without_c10d_log(text: str) -> str:
    """`text` without its c10d log entries and the backtraces they carry."""
    kept, in_entry = [], False
    for line in text.splitlines(keepends=True):
        if _LOG_HEADER.match(line):
            in_entry = True
        elif not (in_entry and _BACKTRACE.match(line)):
            in_entry = False
            kept.append(line)
    return "".join(kept)


class _Held:
    """The one file fd 2 is held in (reused: a follower polls the store 20 times a second), and
    the lock that keeps two threads from holding it at once."""

    file: IO[bytes] | None = None
    lock = threading.Lock()


@contextlib.contextmanager
def filtered() -> Iterator[None]:
    """Run the block with fd 2 held in a file, then write back what it got minus c10d's log entries."""
    with _Held.lock:
        if _Held.file is None:
            _Held.file = tempfile.TemporaryFile()
        held = _Held.file.fileno()
        os.ftruncate(held, 0)
        os.lseek(held, 0, os.SEEK_SET)
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(held, 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            os.lseek(held, 0, os.SEEK_SET)
            written = os.read(held, os.fstat(held).st_size) if os.fstat(held).st_size else b""
            if written:
                kept = without_c10d_log(written.decode(errors="replace"))
                if kept:
                    os.write(2, kept.encode())
