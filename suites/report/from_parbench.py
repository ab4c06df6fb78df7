"""Rows of the tidy table from parbench's own results store (JSON Lines, suites.records.store)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from suites.records.metric_registry import TIDY_METRICS
from suites.records.record import Record
from suites.records.store import load_records
from suites.report.columns import case_fields, environment_fields
from suites.report.limit_columns import limit_fields

SOURCE = "parbench"


def row(record: Record, path: Path) -> dict[str, Any]:
    m, metrics, check = record.measurement, record.metrics, record.check
    timing: dict[str, Any] = {}
    if m is not None:
        q1, q3 = m.quartiles
        timing = {"median_s": m.median, "iqr_s": m.iqr, "q1_s": q1, "q3_s": q3, "n": m.n,
                  "samples_s": m.samples, "noisy": m.noisy, "compile_s": m.compile_s,
                  "straggler": m.straggler, "sustained_step_s": m.sustained_step_s,
                  "energy_reason": m.energy.reason if m.energy else ""}
    return {
        "source": SOURCE, **environment_fields(record.environment, str(record.case.device)),
        **case_fields(record.case), "emulated": record.emulated, "status": str(record.status),
        "reason": record.reason, **timing, **limit_fields(record),
        "contended": record.contention.contended if record.contention else None,
        "contention": record.contention.why if record.contention else "",
        **{name: metrics.get(name) for name in TIDY_METRICS},
        "check_passed": check.passed if check else None, "check_metric": check.metric if check else "",
        "check_value": check.value if check else None,
        "check_s": check.check_s if check else None,
        "check_memory_gib": (check.memory_bytes / 2**30 if check and check.memory_bytes is not None else None),
        "run_id": record.run_id,
        "timestamp": record.timestamp, "suite": record.suite, "path": str(path),
    }


def rows(path: Path) -> Iterator[dict[str, Any]]:
    """A line that is not a record is skipped with a ResultsWarning naming file and line."""
    return (row(record, path) for record in load_records([path]))
