"""Published reference figures: the editable table `parbench report` sets a machine's figures beside.

`suites/references.toml` ships with the package; `PARBENCH_REFERENCES` names a file of the same
format whose rows come first. A row is data only: a figure someone published, its source and its
conditions. Which records it matches is `ReferenceRow.matches`.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

from suites import knobs
from suites.cases.user_files import shipped_table, user_table
from suites.errors import UserError
from suites.kept.peaks import name_tokens

REFERENCES_ENV = "PARBENCH_REFERENCES"
REFERENCES_FILE = "references.toml"


@dataclass(frozen=True)
class ReferenceRow:
    model: str
    #: Words that must all be whole words of the device's name (`suites.kept.peaks.name_tokens`).
    match: str
    #: The device as the source names it.
    device: str
    precision: str
    n_devices: int
    samples_per_s: float
    source: str
    unit: str = "samples/s"
    framework: str = ""
    url: str = ""
    conditions: str = ""

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> "ReferenceRow":
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING}
        missing = sorted(required - set(table))
        unknown = sorted(set(table) - known)
        if missing or unknown:
            problem = (f"missing {', '.join(missing)}" if missing else "") + \
                      ("; " if missing and unknown else "") + (f"unknown keys {', '.join(unknown)}" if unknown else "")
            raise UserError(f"{where}: {problem}; a row needs {', '.join(sorted(required))} "
                            f"(optional: {', '.join(sorted(known - required))})")
        try:
            return cls(**{**table, "n_devices": int(table["n_devices"]),
                          "samples_per_s": float(table["samples_per_s"])})
        except (TypeError, ValueError) as error:
            raise UserError(f"{where}: n_devices and samples_per_s must be numbers ({error})") from None

    def matches_device(self, device_name: str) -> bool:
        wanted = set(name_tokens(self.match))
        return bool(wanted) and wanted.issubset(name_tokens(device_name))


def load_references(user_file: str | None = None) -> tuple[ReferenceRow, ...]:
    """The user's rows (`user_file`, else $PARBENCH_REFERENCES) first, then the shipped ones."""
    rows: list[ReferenceRow] = []
    user_file = user_file or knobs.read(REFERENCES_ENV)
    if user_file:
        data = user_table(user_file, f"reference table ({REFERENCES_ENV})", f"fix the file or unset {REFERENCES_ENV}")
        rows += _rows(data, user_file)
    return tuple(rows + _rows(shipped_table(REFERENCES_FILE), f"suites/{REFERENCES_FILE}"))


def _rows(data: Mapping[str, Any], where: str) -> list[ReferenceRow]:
    tables = data.get("reference", [])
    if not isinstance(tables, list):
        raise UserError(f"{where}: 'reference' must be an array of tables ([[reference]])")
    return [ReferenceRow.from_table(table, f"{where}, reference row {index + 1}")
            for index, table in enumerate(tables)]
