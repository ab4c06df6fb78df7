"""Rows of the tidy table from asv results files (`results/asv/<machine>/<commit>-<env>.json`).

asv 0.6 writes result-file api version 2: ``results`` maps a benchmark name to a row whose
fields are named by ``result_columns`` (result, params, version, started_at, duration,
stats_q_25, stats_q_75, stats_number, stats_repeat, samples, ...). ``params`` is a list of
lists of parameter values written as Python reprs; ``result`` and ``samples`` are flat lists
over the product of those lists. A result of null means the benchmark failed, NaN that it was
skipped (setup raised NotImplementedError: parbench's benchmarks do that for unavailable cases).

parbench's asv benchmarks (benchmarks/) are named ``<module>.<Class>.<method>`` (relative to
benchmark_dir) with the methods in `METHODS`; a class holds one workload's cases. Their
parameters are the named axes of `asv_layout.AXES` (framework, device, strategy, precision,
params): the case id is the class's workload joined with one value per axis. asv runs every
combination of the axes' values and records those that are no case as skipped (NaN), exactly
like an unavailable case; benchmarks.json lists each benchmark's `case_ids`, so a skipped
combination is a row (unavailable) only when it is listed there. Without that list only
measured combinations are rows. Older results take one parameter, `case`, whose values are
case ids; they are still read.

A result is kept only when its benchmark version equals the current one in ``benchmarks.json``
(two levels up from the results file) where that file exists: a changed workload makes old
numbers incomparable, exactly as asv itself treats them.
"""
from __future__ import annotations

import itertools
import json
import math
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from suites.cases.case import Case
from suites.records.asv_layout import AXES, case_id_from_axes, workload_of_class
from suites.records.store import ResultsWarning
from suites.report.load.columns import case_fields

SOURCE = "asv"
#: benchmark method -> the tidy column its result fills. Multi-process cases have no
#: `time_step` (asv cannot time inside the ranks); their `track_rank_step_s` is the median
#: global step the ranks timed, barrier to barrier, so it fills `median_s` too.
METHODS = {"time_step": "median_s", "track_rank_step_s": "median_s",
           "track_samples_per_s": "samples_per_s", "track_tflops": "tflops"}


def is_asv_results(data: Any) -> bool:
    return isinstance(data, dict) and "commit_hash" in data and "results" in data and "env_name" in data


def _unrepr(value: Any) -> Any:
    """asv stores parameter values as reprs: "'matmul/torch/...'" -> 'matmul/torch/...'."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _benchmark_index(path: Path) -> dict[str, dict[str, Any]] | None:
    """{benchmark name: its entry (version, param_names, ...)} from benchmarks.json beside the
    machine folders, or None where there is no such file."""
    index = path.parent.parent / "benchmarks.json"
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {name: entry for name, entry in data.items() if isinstance(entry, dict)}


def _case_position(names: list[str] | None, params: list[list[Any]]) -> int | None:
    """Which asv parameter holds the case id: the one named `case`, else the first that parses."""
    if names and "case" in names:
        return names.index("case")
    for position, values in enumerate(params):
        try:
            [Case.from_id(_unrepr(value)) for value in values]
        except ValueError:
            continue
        return position
    return None


def _axis_cases(name: str, entry: dict[str, Any] | None, combos: list[tuple[str, ...]],
                results: list[Any]) -> list[Case | None]:
    """The case of each combination of named-axis values, None where it is no case."""
    listed = set((entry or {}).get("case_ids") or ())
    workload = workload_of_class(name.rsplit(".", 2)[-2], listed)
    if workload is None:
        return [None] * len(combos)
    cases: list[Case | None] = []
    for combo, value in itertools.zip_longest(combos, results[:len(combos)]):
        case_id = case_id_from_axes(workload, combo)
        cases.append(Case.from_id(case_id) if case_id in listed or _number(value) is not None else None)
    return cases


def _combo_cases(name: str, entry: dict[str, Any] | None, params: list[list[Any]],
                 results: list[Any]) -> list[Case | None]:
    """The case of each combination of the result's parameters (asv's order), None where it is
    no case: named axes (current benchmarks) or one `case` parameter (older ones)."""
    combos = list(itertools.product(*([_unrepr(value) for value in values] for values in params)))
    names = entry.get("param_names") if entry else None
    if names == list(AXES) or (names is None and len(params) == len(AXES)):
        return _axis_cases(name, entry, combos, results)
    position = _case_position(names, params)
    if position is None:
        return [None] * len(combos)
    return [Case.from_id(combo[position]) for combo in combos]


def _environment(data: dict[str, Any]) -> dict[str, Any]:
    machine = data.get("params") or {}
    try:
        memory = round(int(machine.get("ram")) / 2**20, 1)  # asv stores kB
    except (TypeError, ValueError):
        memory = None
    requirements = data.get("requirements") or {}
    return {"machine": str(machine.get("machine", "?")), "hostname": "",
            "cpu_model": machine.get("cpu", ""), "cpu_cores": machine.get("num_cpu"),
            "memory_gib": memory, "gpus": "", "os": machine.get("os", ""),
            "python": data.get("python") or machine.get("python", ""),
            "libraries": ", ".join(f"{name} {version}" for name, version in sorted(requirements.items())
                                   if version),
            "git_commit": str(data.get("commit_hash", ""))[:12], "threads": ""}


def _status(value: Any) -> tuple[str, str]:
    if value is None:
        return "failed", "asv recorded no result: the benchmark raised (asv keeps no error text; see `asv run -e`)"
    if isinstance(value, float) and math.isnan(value):
        return "unavailable", ("skipped by asv: the benchmark's setup raised NotImplementedError "
                               "(case unavailable there)")
    return "ok", ""


def rows(path: Path, data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if "result_columns" not in data:
        warnings.warn(f"{path}: asv results in the pre-0.5 format (no result_columns); run `asv update` "
                      f"to convert it; skipped", ResultsWarning, stacklevel=2)
        return
    environment = _environment(data)
    index = _benchmark_index(path)
    columns = data["result_columns"]
    by_case: dict[str, dict[str, Any]] = {}
    outdated = 0
    for name, values in data["results"].items():
        method = name.rsplit(".", 1)[-1]
        if method not in METHODS:
            continue
        fields = dict(zip(columns, values))
        current = index.get(name) if index is not None else None
        if index is not None and (current is None or current.get("version") != fields.get("version")):
            outdated += 1
            continue
        results = fields.get("result") or []
        cases = _combo_cases(name, current, fields.get("params") or [], results)
        per_combo = {key: fields.get(key) or [None] * len(cases)
                     for key in ("samples", "stats_q_25", "stats_q_75", "stats_repeat")}
        started = fields.get("started_at")
        for i, case in enumerate(cases):
            if case is None:
                continue
            value = results[i] if i < len(results) else None
            entry = by_case.setdefault(case.id, {"case": case, "started_at": started})
            entry[METHODS[method]] = value
            if method == "time_step":
                entry.update(samples=per_combo["samples"][i], q1=per_combo["stats_q_25"][i],
                             q3=per_combo["stats_q_75"][i], repeat=per_combo["stats_repeat"][i])
    if outdated:
        warnings.warn(f"{path}: {outdated} asv benchmark result(s) skipped: their benchmark version differs "
                      f"from the current one in benchmarks.json, or the benchmark is gone (the workload changed since)",
                      ResultsWarning, stacklevel=2)
    run_id = f"{str(data['commit_hash'])[:8]}-{data['env_name']}"
    for entry in by_case.values():
        case: Case = entry["case"]
        status, reason = _status(entry.get("median_s", entry.get("samples_per_s", entry.get("tflops"))))
        samples = entry.get("samples") or ()
        q1, q3 = entry.get("q1"), entry.get("q3")
        started = entry.get("started_at") or data.get("date")
        ok = status == "ok"
        yield {
            "source": SOURCE, **environment, **case_fields(case),
            "device_name": environment["cpu_model"] if case.device.value == "cpu" else "",
            "emulated": case.device.value == "cpu" and case.n_devices > 1,
            "status": status, "reason": reason,
            "median_s": entry.get("median_s") if ok else None,
            "q1_s": q1 if ok else None, "q3_s": q3 if ok else None,
            "iqr_s": q3 - q1 if ok and q1 is not None and q3 is not None else None,
            "n": (len(samples) or entry.get("repeat")) if ok else None,
            "samples_s": samples if ok else (),
            "samples_per_s": _number(entry.get("samples_per_s")), "tflops": _number(entry.get("tflops")),
            "run_id": run_id, "suite": "asv", "path": str(path),
            "timestamp": datetime.fromtimestamp(started / 1000, timezone.utc).isoformat() if started else None,
        }


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not math.isnan(value) else None
