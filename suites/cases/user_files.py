"""User-editable TOML files that override a shipped table (peaks, prices), and the check of a
table's keys against what it declares."""
from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from suites.errors import UserError
from suites.ranges import Range, Refused


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


#: What each key of a user's table holds: text (`str`) or a number in a `Range`.
Schema = Mapping[str, "type[str] | Range"]


def field_problem(table: Mapping[str, Any], schema: Schema) -> tuple[str, str] | None:
    """(key, why) for the first key of `table` that `schema` does not declare or whose value is not
    of its declared kind (text, or a number in its `Range`); None where every key is. Shared by the
    user files that declare their keys (peaks, references, calibration)."""
    for key, value in table.items():
        kind = schema.get(key)
        if kind is None:
            return key, f"unknown key; allowed: {', '.join(schema)}"
        if isinstance(kind, Range):
            try:
                kind.check(value)
            except Refused as error:
                return key, f"{value!r} is not valid: expected {error}"
        elif not isinstance(value, kind):
            return key, f"{value!r} is not valid: expected text"
    return None
