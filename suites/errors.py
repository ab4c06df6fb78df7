"""Errors a user can fix. The CLI prints them as one line and exits non-zero."""
from __future__ import annotations


class UserError(Exception):
    """Bad input: the message names the problem and the way out; no traceback is shown."""


class GridError(UserError):
    """A suite grid file that cannot be turned into cases."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(f"{source}: {key}: {problem}")
        self.source = source
        self.key = key
