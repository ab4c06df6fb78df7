"""Which rows did the same work: each row's work fingerprint (`suites.records.work_fingerprint`), and
why two rows that look alike (one family, one precision, on two device types) do not pair.

A cross-machine ratio pairs rows of equal work (`work_key`): every part of the fingerprint but the
precision, which the views hold apart (a hardware ratio compares equal precision; the "best
passing precision" view says which each side ran). `precision_policy` is the precision part: the
precision and, in mixed precision, who applies it. A record's stored work is used as stored; an
older record's is inferred from its case and details with the `Definitions` the report is given
(`suites.measure.work_definitions.current`, passed in by the report command: the report reads
records, not workloads), and without them its sizes stay unresolved and it pairs with nothing.
"""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from suites.cases.case import Case
from suites.records.work_fingerprint import PARTS, Definitions, Work, why_not_paired, work_of

#: The parts a pair must share; the precision is compared apart (see the module).
PAIRED_PARTS = tuple(name for name in PARTS if name != "precision")
WORK_COLUMNS = ("work_key", "precision_policy", "work_text", "work_inferred")


def _work(case_id: str, source: Any, definitions: Definitions) -> Work:
    stored = json.loads(source) if isinstance(source, str) and source else {}
    try:
        case = Case.from_id(case_id).to_dict()
    except (ValueError, KeyError, TypeError):
        case = {"workload": case_id.split("/")[0] if case_id else "?"}
    return work_of({"case": case, "details": stored.get("details") or {}, "work": stored.get("work")}, definitions)


def _key(work: Work) -> str:
    """16 hex digits of the parts but the precision; '' where a part is unresolved (pairs with nothing)."""
    return work.digest(PAIRED_PARTS) if work.resolved else ""


def add_work(frame: pd.DataFrame, definitions: Definitions | None) -> pd.DataFrame:
    """`frame` with `WORK_COLUMNS`: computed once per distinct (case, what the record says of its
    work), so a fleet of copies of one set of cases costs one fingerprint per case."""
    frame = frame.copy(deep=False)
    sources = frame["work_source"] if "work_source" in frame else pd.Series("", index=frame.index)
    keys = pd.Series(list(zip(frame["case_id"].astype(str), sources.fillna("").astype(str))), index=frame.index)
    made: dict[tuple[str, str], tuple[str, str, str, bool]] = {}
    for case_id, source in keys.unique():
        work = _work(case_id, source, definitions or Definitions())
        made[(case_id, source)] = (_key(work), work.parts.get("precision", ""), work.describe(), work.inferred)
    values = [made[key] for key in keys]
    for position, column in enumerate(WORK_COLUMNS):
        frame[column] = pd.Series([value[position] for value in values], index=frame.index,
                                  dtype=bool if column == "work_inferred" else object)
    return frame


def as_record(row: pd.Series) -> dict[str, Any]:
    """The little of a record `why_not_paired` reads, from a row with `WORK_COLUMNS`' source."""
    stored = json.loads(row["work_source"]) if isinstance(row.get("work_source"), str) and row["work_source"] else {}
    return {"case": Case.from_id(str(row["case_id"])).to_dict(), "details": stored.get("details") or {},
            "work": stored.get("work"), "timestamp": str(row.get("timestamp") or "")}


def why_apart(mine: pd.Series, reference: pd.Series, definitions: Definitions | None) -> str:
    """Why two rows of one family do not pair, in words, the older named by its device type
    (`type` column): "the H100 80GB HBM3 ×1 record ran the older ResNet-50 recipe: NCHW, plain SGD"."""
    text = why_not_paired(as_record(mine), as_record(reference), definitions or Definitions())
    if not text.startswith("the older record"):
        return text
    older = mine if str(mine.get("timestamp")) < str(reference.get("timestamp")) else reference
    return text.replace("the older record", f"the {older['type']} record", 1)
