"""Files parbench writes where a user names them (a batch script, a gate baseline, a worker's
outcome): checked before the work, never clobbering what is not ours, written whole or not at all.

A command checks each such file when it starts, before anything is measured (`OutputFile.check`):
its folder exists, is a folder and can be written; the path is not a folder, a FIFO or a device;
and an existing file is replaced only where parbench wrote it (it carries the kind's `signature`
near its start) or the user asked (`replace_any`, e.g. `--force`). A file of measured records is
never replaced, asked or not. Each problem is one line naming the option, the path and the way out.

`OutputFile.write` checks again (the folder may have changed during the run), then writes a
temporary file in the same folder and renames it over the path (`os.replace`): a full disk or a
kill leaves the old file as it was and no partial file behind.
"""
from __future__ import annotations

import argparse
import errno
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from suites.errors import UserError

#: How much of an existing file is read to recognise it (its signature, or a record's start).
HEAD_BYTES = 4096
#: What every line of a parbench records file starts with (`Record.to_dict`, written by json.dumps).
RECORD_START = b'{"schema":'
#: What an OSError says where the disk is the cause.
DISK_PROBLEMS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EIO: "I/O error",
                 errno.EFBIG: "file too large"}
SPECIAL_FILES = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                 (stat.S_ISBLK, "block device"))


def output_path(value: str) -> Path:
    """argparse type of an option naming a file or folder parbench writes: an empty value is refused
    (Path reads '' as '.', so the output would land in the current folder unasked)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or folder; give one (. for the current "
                                         "folder)")
    return Path(value)


@dataclass(frozen=True)
class OutputFile:
    """A file parbench will write at `path`, named by `option` (e.g. "--script").

    `signature`: bytes every file of this kind that parbench writes carries in its first
    `HEAD_BYTES`, so a file holding them is parbench's own to replace (None: no existing file is).
    `replace_any`: the user asked to replace a file parbench did not write; `how_to_replace` says
    how they ask (shown where a file is refused). `create_folder`: a missing folder is made (at the
    check, before the work), not refused."""

    path: Path
    option: str
    signature: bytes | None = None
    replace_any: bool = False
    how_to_replace: str = "remove it first"
    create_folder: bool = False

    def _problem(self, text: str) -> UserError:
        return UserError(f"{self.option} {self.path}: {text}")

    def target(self) -> Path:
        """Where the bytes go: the path, or the file a symbolic link at it points to (the link stays)."""
        return Path(os.path.realpath(self.path)) if self.path.is_symlink() else self.path

    def check(self) -> None:
        """UserError (one line) unless the file can be written and may be replaced."""
        target = self.target()
        folder = target.parent
        if self.create_folder:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except FileExistsError:  # a file in its place: said below
                pass
            except OSError as error:
                raise self._problem(f"cannot create the folder {folder} ({error.strerror}); choose another "
                                    f"path") from None
        if not folder.exists():
            raise self._problem(f"the folder {folder} does not exist; create it or choose another path")
        if not folder.is_dir():
            raise self._problem(f"{folder} is not a folder; choose another path")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise self._problem(f"the folder {folder} is not writable; choose a folder you can write")
        try:
            mode = target.stat().st_mode
        except FileNotFoundError:
            return
        except OSError as error:
            raise self._problem(f"cannot be examined ({error.strerror}); choose another path") from None
        if stat.S_ISDIR(mode):
            raise self._problem("is a folder, not a file; name a file in it or choose another path")
        for test, kind in SPECIAL_FILES:
            if test(mode):
                raise self._problem(f"is a {kind}, not a regular file; choose another path")
        head = self._head(target)
        if _holds_records(target, head):
            raise self._problem("holds parbench records, which parbench never overwrites; choose another path")
        if not self.replace_any and not (self.signature is not None and self.signature in head):
            raise self._problem(f"exists and parbench did not write it; choose another path, or "
                                f"{self.how_to_replace}")

    def _head(self, target: Path) -> bytes:
        try:
            with open(target, "rb") as handle:
                return handle.read(HEAD_BYTES)
        except OSError as error:
            raise self._problem(f"exists but cannot be read ({error.strerror}); choose another path") from None

    def write(self, data: str | bytes) -> Path:
        """Check again, then write `data` whole in place of the file (or not at all: UserError)."""
        self.check()
        target = self.target()
        payload = data.encode() if isinstance(data, str) else data
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        replaced = target.exists()
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # a new file: 0o666 less the umask
            try:
                if replaced:  # keeps the mode of the file it replaces
                    os.fchmod(fd, stat.S_IMODE(target.stat().st_mode))
                _write_all(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, target)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            problem = DISK_PROBLEMS.get(error.errno or 0, error.strerror or type(error).__name__)
            kept = "the file is as it was" if replaced else "nothing was written"
            raise self._problem(f"cannot write it ({problem}); {kept}; free space there or choose another "
                                f"path") from None
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return self.path


def check_writable(path: Path, option: str, *, replace_any: bool = False) -> None:
    """UserError (one line naming `option`) unless parbench may write the file `path`: for a
    command to call before its work (`OutputFile.check`); `replace_any` where the file is
    parbench's own table, read and written again."""
    OutputFile(path, option, replace_any=replace_any).check()


def write_atomically(path: Path, data: str | bytes, option: str, *, replace_any: bool = False) -> Path:
    """Write `data` whole at `path` or not at all (`OutputFile.write`)."""
    return OutputFile(path, option, replace_any=replace_any).write(data)


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written; a disk that takes none raises ENOSPC."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _holds_records(path: Path, head: bytes) -> bool:
    """Whether the file is (or is named as) a parbench records file."""
    named = path.name.startswith("records-") and path.suffix == ".jsonl"
    return named or head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(RECORD_START)
