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
numbers incomparable, exactly as asv itself treats them. A benchmarks.json that cannot be read
says nothing of which results are current, so the results beside it are skipped, said.

A result of parbench's benchmarks is validated as parbench's own records are (the same
`suites.records.seconds`): a step time, figure, sample or quartile that is no finite number
>= 0 (asv's null and NaN excepted: failed, skipped), or a repeat count that is no count, refuses
its case's row. Each file says in one ResultsWarning what it skipped: its format (no
result_columns), its benchmarks.json, its refused rows (the first, and how many more), or that
it holds no parbench case at all (another project's results).
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
from suites.records.seconds import count_problem, is_number, is_seconds, seconds_problem
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


class UnreadableIndex(ValueError):
    """A benchmarks.json that is there but cannot be read as asv's index of benchmarks."""


def _benchmark_index(path: Path) -> dict[str, dict[str, Any]] | None:
    """{benchmark name: its entry (version, param_names, ...)} from benchmarks.json beside the
    machine folders, or None where there is no such file; UnreadableIndex where it is there but
    no JSON object (a file cut short, garbage, one that cannot be read)."""
    index = path.parent.parent / "benchmarks.json"
    if not index.exists():
        return None
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        problem = getattr(error, "strerror", None) or f"{type(error).__name__}: {str(error)[:80]}"
        raise UnreadableIndex(f"{index} is not readable as JSON ({problem})") from None
    if not isinstance(data, dict):
        raise UnreadableIndex(f"{index} is a JSON {type(data).__name__}, not asv's object of benchmarks")
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
    """The case of each combination of named-axis values, None where it is no case: one that
    benchmarks.json does not list (or, without its list, one asv recorded no result of: null or
    NaN). A result that is no number is one, and is refused as such (`_value_problem`)."""
    listed = set((entry or {}).get("case_ids") or ())
    workload = workload_of_class(name.rsplit(".", 2)[-2], listed)
    if workload is None:
        return [None] * len(combos)
    cases: list[Case | None] = []
    for combo, value in itertools.zip_longest(combos, results[:len(combos)]):
        case_id = case_id_from_axes(workload, combo)
        cases.append(Case.from_id(case_id) if case_id in listed or _status(value)[0] == "ok" else None)
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


def _format_problem(data: dict[str, Any]) -> str:
    """Why the file's rows cannot be read at all ('' where they can): no result_columns (asv before
    0.5), or result_columns that are no list of column names."""
    if "result_columns" not in data:
        return "asv results in the pre-0.5 format (no result_columns); run `asv update` to convert it"
    columns = data["result_columns"]
    if not (isinstance(columns, list) and all(isinstance(column, str) for column in columns)):
        return f"asv results whose result_columns is {columns!r:.40}, not a list of column names"
    return ""


def _value_problem(method: str, value: Any) -> str:
    """Why a benchmark's result for one combination is no figure ('' where it is one, or asv's
    null (failed) or NaN (skipped))."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if METHODS[method] == "median_s":
        return seconds_problem("result", value)
    if not (is_number(value) and math.isfinite(value) and value >= 0):
        return f"result is {value!r:.40}, not a figure (a finite number >= 0)"
    return ""


def _timing_problem(entry: dict[str, Any]) -> str:
    """Why a measured time_step combination's samples, quartiles or repeat count are unusable (''
    where each is usable or absent)."""
    samples = entry.get("samples")
    if samples is not None and not (isinstance(samples, list) and all(is_seconds(sample) for sample in samples)):
        return f"samples is {samples!r:.40}, not a list of times in seconds"
    return (seconds_problem("stats_q_25", entry.get("q1")) or seconds_problem("stats_q_75", entry.get("q3"))
            or count_problem("stats_repeat", entry.get("repeat")))


def _say(path: Path, refused: list[str], outdated: int, benchmarks: int, made: int) -> None:
    """The file's lines: results of an older benchmark version, refused rows (the first, and how
    many more), or, where it made no row and said nothing else, that it holds no parbench case."""
    if outdated:
        warnings.warn(f"{path}: {outdated} asv benchmark result(s) skipped: their benchmark version differs "
                      f"from the current one in benchmarks.json, or the benchmark is gone (the workload changed since)",
                      ResultsWarning, stacklevel=3)
    if refused:
        more = f"; and {len(refused) - 1} more of it skipped" if len(refused) > 1 else ""
        warnings.warn(f"{path}: {refused[0]}; row skipped{more}", ResultsWarning, stacklevel=3)
    elif not made and not outdated:
        held = (f"none of its {benchmarks} benchmark result(s) times a parbench case: another project's?"
                if benchmarks else "no benchmark result in it")
        warnings.warn(f"{path}: asv results without a parbench case ({held}); skipped", ResultsWarning, stacklevel=3)


def rows(path: Path, data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    problem = _format_problem(data)
    try:
        index = _benchmark_index(path)
    except UnreadableIndex as error:
        problem = problem or (f"its {error}: which results are of the current benchmark versions cannot be told; "
                              f"run asv again, which writes it anew, or remove it to read every result unchecked")
    if problem:
        warnings.warn(f"{path}: {problem}; skipped", ResultsWarning, stacklevel=2)
        return
    environment = _environment(data)
    columns = data["result_columns"]
    by_case: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
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
            measured = method == "time_step" and _status(value)[0] == "ok"  # a failed or skipped one has no timing
            why = _value_problem(method, value) or (_timing_problem(entry) if measured else "")
            if why and case.id not in refused:
                refused[case.id] = f"benchmark {name[:80]!r} ({case.id}): {why}"
    run_id = f"{str(data['commit_hash'])[:8]}-{data['env_name']}"
    made = 0
    for entry in by_case.values():
        if entry["case"].id in refused:
            continue
        made += 1
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
    _say(path, list(refused.values()), outdated, len(data["results"]), made)


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not math.isnan(value) else None
