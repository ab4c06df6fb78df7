"""Rows of the tidy table from pytest-benchmark JSON (`--benchmark-json` / `--benchmark-save`).

parbench's pytest-benchmark suite stores, per benchmark, ``extra_info`` = {"case": case dict,
"status", "metrics", "check", "emulated"} (and "reason" when not ok), and in ``machine_info``
the key ``parbench``: the same provenance environment as parbench's own records. Stats are in
seconds; ``data`` (the raw rounds) is present when the run saved it.

A benchmark is validated as parbench's own records are (`suites.records.store.check`, with the
same `suites.records.seconds`): a step time that is not a finite number of seconds (a median of
-1, a mean of "fast"), rounds that are no count of at least one (0 rounds: nothing timed), or a
case on no device, refuses its row; the file's other benchmarks still load. A file's refused
rows are one ResultsWarning naming the file, its first refused benchmark and why, and how many
more. A file of which no row is made, because none of its benchmarks is parbench's (no case in
extra_info: another project's), is one ResultsWarning too.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterator

from suites.cases.case import Case
from suites.records.check import NOT_CHECKED
from suites.records.metric_registry import TIDY_METRICS
from suites.records.seconds import count_problem, is_seconds, seconds_problem
from suites.records.store import ResultsWarning
from suites.report.load.columns import case_fields, environment_fields

SOURCE = "pytest-benchmark"


def is_pytest_benchmark(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "machine_info" in data


def _environment(data: dict[str, Any]) -> dict[str, Any]:
    machine_info = data.get("machine_info") or {}
    environment = machine_info.get("parbench")
    if isinstance(environment, dict):
        return environment
    # A run without parbench's hook: describe the machine with what pytest-benchmark knows.
    return {"machine": machine_info.get("node", "?"), "hostname": machine_info.get("node", ""),
            "cpu": {"model": (machine_info.get("cpu") or {}).get("brand_raw", "")},
            "python": machine_info.get("python_version", "")}


#: The stats of a benchmark that are seconds (pytest-benchmark's names).
TIMES = ("median", "iqr", "q1", "q3", "mean")


def _refusal(case: Case, status: str, stats: dict[str, Any]) -> str:
    """Why a benchmark can make no row ('' where it can): its case on no device, or an ok
    benchmark whose stats are no step times or whose rounds are no count (none timed)."""
    if case.n_devices < 1:
        return f"case n_devices {case.n_devices} is not a device count (a whole number >= 1)"
    if status != "ok":
        return ""
    for name in TIMES:
        problem = seconds_problem(f"stats.{name}", stats.get(name))
        if problem:
            return problem
    if not (is_seconds(stats.get("median")) and stats["median"] > 0):
        return "no median step time (stats.median > 0 s)"
    rounds = count_problem("stats.rounds", stats.get("rounds"))
    if rounds:
        return f"{rounds}: no round timed"
    if not all(is_seconds(value) for value in stats.get("data") or ()):
        return "stats.data holds a value that is not a time in seconds"
    return ""


def _say(path: Path, refused: list[str], foreign: int, made: int) -> None:
    """The file's one line: its refused rows (the first, and how many more), or, where it made no
    row and refused none, that it holds no benchmark of parbench's."""
    if refused:
        more = f"; and {len(refused) - 1} more benchmark(s) of it skipped" if len(refused) > 1 else ""
        warnings.warn(f"{path}: {refused[0]}; row skipped{more}", ResultsWarning, stacklevel=3)
    elif not made:
        held = (f"none of its {foreign} benchmark(s) has a parbench case in extra_info: another project's, or run "
                f"without parbench's pytest plugin?" if foreign else "no benchmark in it")
        warnings.warn(f"{path}: pytest-benchmark JSON without a parbench benchmark ({held}); skipped",
                      ResultsWarning, stacklevel=3)


def rows(path: Path, data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    environment = _environment(data)
    commit = (data.get("commit_info") or {}).get("id") or ""
    refused: list[str] = []
    foreign = made = 0
    for benchmark in data["benchmarks"]:
        extra = benchmark.get("extra_info") or {}
        if not isinstance(extra.get("case"), dict):
            foreign += 1  # not one of parbench's benchmarks
            continue
        case = Case.from_dict(extra["case"])
        status = str(extra.get("status", "ok"))
        stats = (benchmark.get("stats") or {}) if status == "ok" else {}
        why = _refusal(case, status, stats)
        if why:
            refused.append(f"benchmark {str(benchmark.get('name', '?'))[:80]!r}: {why}")
            continue
        made += 1
        metrics = extra.get("metrics") or {}
        check = extra.get("check") or {}
        samples = stats.get("data") or ()
        fields = environment_fields(environment, str(case.device))
        if commit and not fields["git_commit"]:
            fields["git_commit"] = commit[:12]
        yield {
            "source": SOURCE, **fields, **case_fields(case), "emulated": bool(extra.get("emulated", False)),
            "status": status, "reason": str(extra.get("reason", "")),
            "median_s": stats.get("median"), "iqr_s": stats.get("iqr"), "q1_s": stats.get("q1"),
            "q3_s": stats.get("q3"), "n": len(samples) or stats.get("rounds"), "samples_s": samples,
            "sustained_step_s": stats.get("mean"),  # every round's time over the rounds
            "compile_s": extra.get("compile_s"),  # absent before the compile axis
            **{name: metrics.get(name) for name in TIDY_METRICS},
            "check_passed": check.get("passed") if check.get("metric") != NOT_CHECKED else None,
            "check_metric": check.get("metric", ""),
            "check_value": check.get("value"), "check_s": check.get("check_s"),
            "check_memory_gib": (check["memory_bytes"] / 2**30 if check.get("memory_bytes") is not None else None),
            "run_id": path.stem, "timestamp": data.get("datetime"),
            "suite": "pytest-benchmark", "path": str(path),
        }
    _say(path, refused, foreign, made)
