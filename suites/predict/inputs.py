"""An input of a projection: its value and where it came from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Where an input came from: a record of a run, a sourced data-file row, a published figure, a
#: default the user can override, or an analytic estimate from the model's own shapes (checked against
#: records in docs/predict.md).
KINDS = ("measured", "catalogued", "published", "assumed", "estimated")


@dataclass(frozen=True)
class Input:
    """One input's `value`, its `kind` (one of KINDS) and its `source` (a file row, a page, a flag)."""

    name: str
    value: Any
    kind: str
    source: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"input {self.name}: kind {self.kind!r} is not one of {KINDS}")

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "kind": self.kind, "source": self.source}
