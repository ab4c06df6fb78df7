"""Published reference figures: the editable table `parbench report` sets a machine's figures beside.

`suites/references.toml` ships with the package; `PARBENCH_REFERENCES` names a file of the same
format whose rows come first. A row is data only: a figure someone published, its source and its
conditions. Which records it matches is `suites.report.analyses.references.matches`.

A row's `unit` says which of a record's figures it stands beside: images, samples or sequences per
second are the record's `samples_per_s`, tokens per second its `tokens_per_s` (global batch x
sequence length / step time), and a unit ending in "/GPU" is a figure per device (Megatron's and
NeMo's tokens/s/GPU), set beside the record's figure divided by its device count. `sizes` names the
model's size parameters the figure was measured at where they are not the model's defaults
(Llama 3 8B at sequence 8192: ``sizes = { seq = 8192 }``).
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

import pandas as pd

from suites import knobs
from suites.cases.user_files import field_problem, shipped_table, user_table
from suites.errors import UserError
from suites.hardware.peaks import VERSION, name_tokens
from suites.ranges import Range

REFERENCES_ENV = "PARBENCH_REFERENCES"
REFERENCES_FILE = "references.toml"
#: The top-level entries of a reference table.
ENTRIES = ("version", "reference")

#: unit -> (the record column it reads, whether the figure is per device)
UNITS: dict[str, tuple[str, bool]] = {
    "img/s": ("samples_per_s", False), "samples/s": ("samples_per_s", False),
    "sequences/s": ("samples_per_s", False), "tokens/s": ("tokens_per_s", False),
    "img/s/GPU": ("samples_per_s", True), "sequences/s/GPU": ("samples_per_s", True),
    "tokens/s/GPU": ("tokens_per_s", True),
}


@dataclass(frozen=True)
class ReferenceRow:
    model: str
    #: Words that must all be whole words of the device's name (`suites.hardware.peaks.name_tokens`).
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
    #: Size parameters of the model that differ from its defaults, as (name, value) pairs.
    sizes: tuple[tuple[str, int], ...] = ()

    @property
    def column(self) -> str:
        """The record column the figure stands beside."""
        return UNITS[self.unit][0]

    @property
    def per_device(self) -> bool:
        return UNITS[self.unit][1]

    def run_figure(self, record: Mapping[str, Any]) -> float | None:
        """The record's figure in this row's unit, or None where the record has none (a tokens/s
        row beside a record without a token count)."""
        value = record.get(self.column)
        if value is None or pd.isna(value):
            return None
        return float(value) / (int(record.get("n_devices", 1) or 1) if self.per_device else 1)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str, way_out: str) -> "ReferenceRow":
        """The row a [[reference]] table gives; UserError "WHERE: why; WAY_OUT" where a key is
        missing or unknown, or a value is not of its kind or range (`FIELDS`)."""
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING}
        missing = sorted(required - set(table))
        unknown = sorted(set(table) - known)
        if missing or unknown:
            problem = (f"missing {', '.join(missing)}" if missing else "") + \
                      ("; " if missing and unknown else "") + (f"unknown keys {', '.join(unknown)}" if unknown else "")
            raise UserError(f"{where}: {problem}; a row needs {', '.join(sorted(required))} "
                            f"(optional: {', '.join(sorted(known - required))}); {way_out}")
        if problem := field_problem({key: value for key, value in table.items() if key != "sizes"}, FIELDS):
            raise UserError(f"{where}: {problem[0]}: {problem[1]}; {way_out}")
        unit = table.get("unit", cls.unit)
        if unit not in UNITS:
            raise UserError(f"{where}: unit {unit!r} is not one of {', '.join(UNITS)}; {way_out}")
        sizes = table.get("sizes", {})
        if not isinstance(sizes, Mapping) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                     for v in sizes.values()):
            raise UserError(f"{where}: sizes must be a table of whole numbers, e.g. sizes = {{ seq = 8192 }}; "
                            f"{way_out}")
        return cls(**{**table, "n_devices": int(table["n_devices"]), "samples_per_s": float(table["samples_per_s"]),
                      "sizes": tuple(sorted(sizes.items()))})

    def matches_device(self, device_name: str) -> bool:
        wanted = set(name_tokens(self.match))
        return bool(wanted) and wanted.issubset(name_tokens(device_name))


#: What each key of a [[reference]] row holds but `sizes` (a table of whole numbers): text, or a number in range.
FIELDS: dict[str, type[str] | Range] = {
    **dict.fromkeys(("model", "match", "device", "precision", "source", "unit", "framework", "url", "conditions"), str),
    "n_devices": Range(int, 1, unit="devices"), "samples_per_s": Range(float, 0, True)}


def load_references(user_file: str | None = None) -> tuple[ReferenceRow, ...]:
    """The user's rows (`user_file`, given as `--references`, else $PARBENCH_REFERENCES) first, then
    the shipped ones. A bad file's error names where it was given."""
    rows: list[ReferenceRow] = []
    given, way_out = ("--references", "fix the file or leave out --references") if user_file else (
        REFERENCES_ENV, f"fix the file or unset {REFERENCES_ENV}")
    user_file = user_file or knobs.read(REFERENCES_ENV)
    if user_file:
        what = f"reference table ({given}) {user_file}"
        rows += _rows(user_table(user_file, f"reference table ({given})", way_out), what, way_out)
    return tuple(rows + _rows(shipped_table(REFERENCES_FILE), f"suites/{REFERENCES_FILE}", "fix the shipped table"))


def _rows(data: Mapping[str, Any], where: str, way_out: str) -> list[ReferenceRow]:
    """The rows of a reference table; UserError naming `where`, the entry and `way_out` for an
    entry the table does not declare (a misspelt [[references]] would add no row, silently) or a bad row."""
    unknown = [key for key in data if key not in ENTRIES]
    if unknown:
        raise UserError(f"{where}: {unknown[0]}: not an entry of a reference table (it has {', '.join(ENTRIES)}: "
                        f"a figure goes in a [[reference]] table); {way_out}")
    if "version" in data and (problem := field_problem({"version": data["version"]}, {"version": VERSION})):
        raise UserError(f"{where}: {problem[0]}: {problem[1]}; {way_out}")
    tables = data.get("reference", [])
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise UserError(f"{where}: reference: expected an array of tables ([[reference]]); {way_out}")
    return [ReferenceRow.from_table(table, f"{where}, reference row {index + 1}", way_out)
            for index, table in enumerate(tables)]
