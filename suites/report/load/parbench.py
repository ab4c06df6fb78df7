"""Rows of the tidy table from parbench's own results store (JSON Lines, suites.records.store)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from suites.cases.case import Case
from suites.records.metric_registry import TIDY_METRICS
from suites.records.record import Record
from suites.records.store import Remark, ResultsWarning, numbered_records
from suites.report.load.columns import BOOL_COLUMNS, INT_COLUMNS, case_fields, environment_fields
from suites.report.load.derived import WorkOf
from suites.report.load.like_columns import like_fields
from suites.report.load.limit_columns import limit_fields

SOURCE = "parbench"


def row(record: Record, path: Path) -> dict[str, Any]:
    m, metrics, check = record.measurement, record.metrics, record.check
    timing: dict[str, Any] = {}
    if m is not None:
        q1, q3 = m.quartiles
        timing = {"median_s": m.median, "iqr_s": m.iqr, "q1_s": q1, "q3_s": q3, "n": m.n,
                  "samples_s": m.samples, "noisy": m.noisy, "compile_s": m.compile_s,
                  "straggler": m.straggler, "sustained_step_s": m.sustained_step_s,
                  "energy_reason": m.energy.reason if m.energy else "", "energy_scope": energy_scope(m)}
    return {
        "source": SOURCE, **environment_fields(record.environment, str(record.case.device)),
        **case_fields(record.case), "emulated": record.emulated, "status": str(record.status),
        "reason": record.reason, **timing, **limit_fields(record), **like_fields(record),
        "contended": record.contention.contended if record.contention else None,
        "contention": record.contention.why if record.contention else "",
        # Fields the record side may add; read defensively, so a record without them loads as
        # one that does not say (never as guilty, never as an error).
        "starved": _flag(record.contention, "starved"),
        "bimodal": _flag(m, "bimodal"),
        **{name: metrics.get(name) for name in TIDY_METRICS},
        "check_passed": check.passed if check and check.checked else None,
        "check_metric": check.metric if check else "",
        "check_value": check.value if check else None,
        "check_s": check.check_s if check else None,
        "check_memory_gib": (check.memory_bytes / 2**30 if check and check.memory_bytes is not None else None),
        "run_id": record.run_id,
        "timestamp": record.timestamp, "suite": record.suite, "path": str(path),
    }


def _flag(holder: Any, name: str) -> bool | None:
    """`holder.name` as true/false; None where the holder or the field is absent."""
    value = getattr(holder, name, None) if holder is not None else None
    return None if value is None else bool(value)


#: Energy methods (suites.records.energy_readings) by what their reading covers.
ENERGY_SCOPES = {"nvml_counter": "gpu board (NVML)", "nvml_power": "gpu board (NVML)", "rapl": "cpu package (RAPL)"}


def energy_scope(m: Any) -> str:
    """What the measurement's energy covers: one scope, or several joined with ' + '."""
    devices = m.energy.devices if m is not None and m.energy is not None else ()
    return " + ".join(sorted({ENERGY_SCOPES.get(d.method, str(d.method)) for d in devices}))


def rows(path: Path, remark: Remark | None = None) -> Iterator[dict[str, Any]]:
    """One row per record, each built apart: a line that is not a record, or one no row can be
    made of, is skipped with a ResultsWarning naming file and line; every other line loads (one
    with a field ignored, or that `remark` has something to say of, said once a file:
    `numbered_records`)."""
    for number, record in numbered_records(path, remark):
        try:
            made = row(record, path)
            _check_row(made)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError,
                OverflowError) as error:
            warnings.warn(f"{path}:{number}: malformed record ({type(error).__name__}: {str(error)[:120]}); "
                          f"line skipped", ResultsWarning, stacklevel=2)
            continue
        yield made


def workload_remark(work_of: WorkOf | None) -> Remark | None:
    """What to say of a record whose workload is not registered here (a plugin's, not loaded; a
    name no parbench has): the record is kept with the figures it stored (results are data:
    reading one never needs its code), but its work is unknown here. `work_of` tells, as it
    raises a KeyError naming the workload (`suites.workloads.UnknownWorkload`), once a workload;
    without it nothing can tell, and nothing is said."""
    if work_of is None:
        return None
    registered: dict[str, bool] = {}

    def remark(record: Record) -> str:
        name = record.case.workload
        if name not in registered:
            registered[name] = _registered(record.case, work_of)
        if registered[name]:
            return ""
        return (f"case.workload {name!r:.40} is not registered here (a plugin's? name its file in PARBENCH_PLUGINS); "
                f"the record is kept with the figures it stored, its work unknown")
    return remark


def _registered(case: Case, work_of: WorkOf) -> bool:
    """Whether `work_of` knows the case's workload: anything but a KeyError naming it (an unknown
    model or strategy of a known workload raises too, naming that)."""
    try:
        work_of(case)
    except KeyError as error:
        return error.args[:1] != (case.workload,)
    except ValueError:  # a known workload whose case's work cannot be resolved: not this remark's to say
        return True
    return True


def _check_row(made: dict[str, Any]) -> None:
    """The table's true/false columns take only true, false or nothing, its count columns only
    whole numbers (or what is no number): one other value there would fail the conversion of
    the whole table (`columns.tidy`), not just its row."""
    for column in BOOL_COLUMNS:
        value = made.get(column)
        if value is not None and not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{column} is {value!r:.40}, not true/false")
    for column in INT_COLUMNS:
        value = made.get(column)
        number = pd.to_numeric(value, errors="coerce") if isinstance(value, (int, float, str)) else None
        if number is not None and not pd.isna(number) and not float(number).is_integer():
            raise ValueError(f"{column} is {value!r:.40}, not a whole number")
