"""User-editable TOML files that override a shipped table (peaks, prices)."""
from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from suites.errors import UserError


def shipped_table(name: str) -> dict[str, Any]:
    """A TOML table shipped inside the package (suites/<name>)."""
    return tomllib.loads(resources.files("suites").joinpath(name).read_text())


def user_table(path: str | Path, what: str, way_out: str) -> dict[str, Any]:
    """A user's override file; an unreadable one is one clear error naming it and the way out."""
    try:
        # utf-8-sig: a byte-order mark some editors write is not TOML
        return tomllib.loads(Path(path).read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as error:
        raise UserError(f"{what} {path}: is not UTF-8 text (byte {error.start}): save it as UTF-8; "
                        f"{way_out}") from None
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UserError(f"{what} {path}: cannot read it ({error}); {way_out}") from None
