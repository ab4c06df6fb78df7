"""Finding the processes a test started, when other tests may run parbench workers too."""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Callable

MARKER_ENV = "PARBENCH_TEST_PROCESS_MARK"


def mark_processes(monkeypatch) -> Callable[[], list[int]]:  # noqa: ANN001 - pytest's MonkeyPatch
    """Mark every process started from now on (through the environment it inherits) and return
    a function listing the marked processes still alive (zombies excluded)."""
    marker = uuid.uuid4().hex
    monkeypatch.setenv(MARKER_ENV, marker)
    needle = f"{MARKER_ENV}={marker}".encode()

    def alive() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in environ and state != "Z":
                found.append(int(entry.name))
        return found

    return alive


def wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether `condition` holds within `timeout_s` (looked at every 0.1 s): a generous bound on
    what another process does, never a measurement."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
