"""The hostile-input sweep (issue 43's closing table): several hundred bad inputs and faults, each
run as `python -m suites ...` in a folder of its own, against one source tree, and classified.

    python tests/hostile/sweep.py --tree DIR --out FILE.json [--only ID-GLOB] [--jobs 2]
    python tests/hostile/sweep.py --table BEFORE.json AFTER.json > docs/bad-input.md

A script, not a test (pytest collects test_*.py only): it takes minutes. tests/test_hostile_rows.py
runs a fast subset of the rows in process.

Each row starts from the same fixture, made by the tree itself (two runs of a one-case grid into
`results/` and `other/`, and the grid as `tiny.toml`), adds its own files, runs one command with a
time limit and compares every file that was there before with what is there after. Its class:

- clean: the row expects a refusal and got a non-zero exit and exactly one non-empty stderr line
  that is no traceback (a `warn` row: one line, whatever the exit; an `ok` row: exit 0, no line);
- hang: the time limit passed; lost: a file that was there is gone or changed other than by an
  appended tail; traceback: stderr holds a Python traceback; silent: exit 0 (or no word at all)
  where it should refuse or warn; multi-line: more than one line; wrong: valid input refused;
- absent: the tree has no such command, option or knob (the feature came later).
"""
from __future__ import annotations

import argparse
import fnmatch
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

REFUSE, WARN, OK = "refuse", "warn", "ok"
CLASSES = ("clean", "traceback", "hang", "silent", "lost", "multi-line", "wrong", "absent")
TIMEOUT_S = 60.0
TINY_GRID = ('[timing]\nbudget_s = 0.2\n[[grid]]\nworkload = "matmul"\nframework = "torch"\ndevice = "cpu"\n'
             'params = { m = 8, n = 8, k = 8 }\n')
RUN = ("run", "--suite", "tiny.toml", "--results", "results")
REPORT = ("report", "results", "-o", "out")
PREDICT = ("predict", "--model", "resnet50", "--to", "h100:8", "--base", "h100:1=1000@64")
REPORT_PREDICT = (*REPORT, "--predict-to", "h100:8", "--predict-model", "resnet50", "--predict-base", "h100:1=1000@64")


class Special:
    """A file system object a row puts in place of a file's text."""


class Fifo(Special):
    pass


class Folder(Special):
    pass


@dataclass(frozen=True)
class Link(Special):
    target: str


@dataclass
class Fixture:
    """The row's folder and the first record `results/` holds (as JSON), for rows that bend it."""
    root: Path
    record: dict[str, Any]
    records: Path  # relative path of results/'s records file


Setup = Callable[[Fixture], None]


@dataclass
class Row:
    id: str
    area: str
    argv: tuple[str, ...]
    expect: str = REFUSE
    what: str = ""  # the input in words, where the command line alone does not say it
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str | bytes | Special] = field(default_factory=dict)
    setup: Setup | None = None
    signal: tuple[int, float] | None = None  # (signal, seconds after the start)
    stdout: str = "pipe"  # pipe | closed | full
    twice: bool = False  # two of the command at once
    control: bool = False  # valid input, expected to work: not counted among the hostile rows
    program: tuple[str, ...] = ()  # another program than `python -m suites` (a framework's own command)
    cwd: str = ""  # the folder it runs in, under the row's own


# --- the rows -------------------------------------------------------------------------------------------

INT_BAD = (("nan", "nan"), ("negative", "-1"), ("zero", "0"), ("empty", ""), ("word", "abc"), ("fraction", "1.5"),
           ("huge", "9" * 20))
FLOAT_BAD = (("nan", "nan"), ("inf", "inf"), ("negative", "-1"), ("zero", "0"), ("empty", ""), ("word", "abc"),
             ("overflow", "1e400"))
RUN_RANK = (*RUN, "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:9")


def number_rows() -> list[Row]:
    """Every numeric option of every command with values no command should take."""
    options: list[tuple[str, tuple[str, ...], str, tuple[tuple[str, str], ...], tuple[str, ...]]] = [
        ("run", RUN, "--budget", FLOAT_BAD, ()),
        ("run", RUN, "--max-minutes", (*FLOAT_BAD, ("tiny", "1e-9")), ()),
        ("run", RUN, "--nnodes", INT_BAD, ()),
        ("run", RUN_RANK, "--node-rank", INT_BAD, ("zero",)),
        ("run", (*RUN_RANK, "--node-rank", "1"), "--rdzv-timeout", FLOAT_BAD, ()),
        ("calibrate", ("calibrate", "--results", "results"), "--sizes", INT_BAD, ()),
        ("calibrate", ("calibrate", "--results", "results"), "--stream-mib", INT_BAD, ()),
        ("parity", ("parity", "--device", "cpu"), "--rounds", INT_BAD, ()),
        ("parity", ("parity", "--device", "cpu"), "--steps", INT_BAD, ()),
        ("parity", ("parity", "--device", "cpu"), "--profile", INT_BAD, ("zero", "huge")),  # huge: every op
        ("predict", PREDICT, "--global-batch", INT_BAD, ()),
        ("predict", PREDICT, "--batch", INT_BAD, ()),
        ("predict", PREDICT, "--microbatches", INT_BAD, ()),
        ("predict", PREDICT, "--host-margin", FLOAT_BAD, ("zero",)),
        ("predict", PREDICT, "--samples", FLOAT_BAD, ()),
        ("predict", PREDICT, "--tokens", FLOAT_BAD, ()),
        ("report", REPORT_PREDICT, "--predict-global-batch", INT_BAD, ()),
        ("report", REPORT_PREDICT, "--predict-batch", INT_BAD, ()),
        ("report", REPORT_PREDICT, "--predict-samples", FLOAT_BAD, ()),
        ("report", REPORT_PREDICT, "--predict-tokens", FLOAT_BAD, ()),
        ("ready", ("ready", "--out", "ready.json"), "--minutes", FLOAT_BAD, ()),
        ("slurm", ("slurm",), "--nodes", INT_BAD, ()),
        ("slurm", ("slurm", "--nodes", "1"), "--gpus-per-node", INT_BAD, ("zero",)),
        ("compare", ("compare", "results", "other"), "--fail-on-regression", FLOAT_BAD, ("zero",)),  # 0: any
    ]
    rows = []
    for command, base, option, values, valid in options:
        for name, value in values:
            if name not in valid:
                rows.append(Row(f"{command}{option}-{name}", "cli-number", (*base, option, value)))
    return rows


LONG = "a" * 5000


def text_rows() -> list[Row]:
    """Names, paths and free text: unknown, empty, control characters, very long."""
    r = []

    def add(name: str, *argv: str, expect: str = REFUSE, what: str = "", **more: Any) -> None:
        r.append(Row(name, "cli-text", tuple(argv), expect=expect, what=what, **more))

    add("no-command")
    add("unknown-command", "frobnicate")
    add("devices-unknown-option", "devices", "--bogus")
    add("list-unknown-option", "list", "--bogus")
    for label, value in (("unknown", "nosuch"), ("empty", ""), ("long", LONG), ("newline", "quick\nrm"),
                         ("escape", "\x1b[31mred"), ("folder", "results"), ("records-file", "@records"),
                         ("run-summary", "@summary"), ("dash", "-")):
        add(f"list--suite-{label}", "list", "--suite", value)
    for label, value in (("unknown-field", "nosuch=1"), ("unknown-value", "framework=jax"), ("empty-key", "=cpu"),
                         ("empty-value", "device="), ("no-match", "zzz-no-such-case"), ("long", LONG),
                         ("escape", "\x1b[2J"), ("bad-glob", "[")):
        add(f"list--filter-{label}", "list", "--suite", "tiny.toml", "--filter", value)
    add("list--availability-without-suite", "list", "--availability")
    for label, value in (("unknown", "nosuch"), ("empty", ""), ("long", LONG)):
        add(f"run--suite-{label}", "run", "--suite", value, "--results", "results")
    for label, value in (("no-match", "zzz-no-such-case"), ("unknown-field", "colour=red"),
                         ("control", "matmul\x07")):
        add(f"run--filter-{label}", *RUN, "--filter", value)
    for label, value in (("empty", ""), ("slash", "a/b"), ("newline", "box\nrm"), ("long", "x" * 300),
                         ("space-only", " ")):
        add(f"run--label-{label}", *RUN, "--label", value)
    add("run--label-dot-dot", *RUN, "--label", "..", expect=OK, control=True)  # a name, not a path: records-...jsonl
    add("run--rehearse-with-node-rank", *RUN, "--rehearse", "--node-rank", "1")
    add("run--node-rank-without-nnodes", *RUN, "--node-rank", "1")
    add("run--rdzv-endpoint-junk", *RUN, "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "no-port")
    add("run--rdzv-endpoint-port-0", *RUN, "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:0")
    add("run--rdzv-endpoint-port-huge", *RUN, "--nnodes", "2", "--node-rank", "1",
        "--rdzv-endpoint", "127.0.0.1:99999")
    add("run--rdzv-endpoint-empty", *RUN, "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "")
    for label, value in (("unknown", "quantum"), ("empty", "")):
        add(f"calibrate--device-{label}", "calibrate", "--results", "results", "--device", value)
        add(f"calibrate--precision-{label}", "calibrate", "--results", "results", "--precision", value)
    add("calibrate--label-slash", "calibrate", "--results", "results", "--label", "a/b")
    add("calibrate--device-gpu-none-here", "calibrate", "--results", "results", "--device", "gpu")
    for label, value in (("nosuch", "nosuch"), ("empty", "")):
        add(f"report-path-{label}", "report", value, "-o", "out")
    add("report-empty-folder", "report", "empty", "-o", "out", files={"empty/.keep": ""})
    add("report-not-results", "report", "tiny.toml", "-o", "out")
    add("report--prices-missing", *REPORT, "--prices", "nope.toml")
    add("report--prices-folder", *REPORT, "--prices", "results")
    add("report--references-missing", *REPORT, "--references", "nope.toml")
    add("report--references-folder", *REPORT, "--references", "results")
    for label, value in (("junk", "junk"), ("unknown-column", "colour=red"), ("empty", ""), ("no-value", "precision="),
                         ("no-match", "precision=fp8")):
        add(f"report--baseline-{label}", *REPORT, "--baseline", value)
    for label, value in (("unknown", "nosuch-machine"), ("empty", "")):
        add(f"report--reference-{label}", *REPORT, "--reference", value)
    add("report--title-long", *REPORT, "--title", "t" * 100000, expect=OK, control=True)
    for label, value in (("unknown-device", "nosuch:8"), ("zero", "h100:0"), ("negative", "h100:-1"),
                         ("word", "h100:x"), ("empty", ""), ("no-count", "h100"), ("zero-nodes", "h100:2x0"),
                         ("huge", "h100:99999999999999999999")):
        add(f"report--predict-to-{label}", *REPORT, "--predict-to", value, "--predict-model", "resnet50",
            "--predict-base", "h100:1=1000@64")
    add("report--predict-base-without-to", *REPORT, "--predict-base", "h100:1=1000@64")
    add("report--predict-model-unknown", *REPORT, "--predict-to", "h100:8", "--predict-model", "nosuch",
        "--predict-base", "h100:1=1000@64")
    add("report--predict-precision-unknown", *REPORT_PREDICT, "--predict-precision", "fp8")
    add("report--predict-network-unknown", *REPORT_PREDICT, "--predict-network", "carrier-pigeon")
    add("report--predict-from-missing", *REPORT, "--predict-to", "h100:8", "--predict-from", "nope")
    for label, value in (("unknown", "nosuch-machine"), ("empty", ""), ("long", LONG), ("escape", "\x1b[2J")):
        add(f"compare-A-{label}", "compare", value, "other")
    add("compare-grid-file", "compare", "tiny.toml", "other")
    add("compare--results-missing", "compare", "box", "other", "--results", "nope")
    add("compare--fail-on-regression-percent", "compare", "results", "other", "--fail-on-regression", "5%")
    for label, value in (("missing", "nope"), ("empty", ""), ("file", "tiny.toml")):
        add(f"memory--results-{label}", "memory", "--results", value)
    add("memory--run-unknown", "memory", "--results", "results", "--run", "nosuch-run")
    add("memory--filter-unknown-field", "memory", "--results", "results", "--filter", "colour=red")
    for label, value in (("unknown-model", ("--model", "nosuch")), ("unknown-device", ("--device", "tpu")),
                         ("unknown-precision", ("--precision", "fp8"))):
        add(f"parity-{label}", "parity", *value)
    for label, value in (("word", "batch=abc"), ("unknown-key", "nosuch=3"), ("negative", "batch=-4"),
                         ("zero", "batch=0"), ("no-value", "batch"), ("no-key", "=3"), ("nan", "batch=nan"),
                         ("huge", "batch=" + "9" * 20)):
        add(f"parity--size-{label}", "parity", "--device", "cpu", "--size", value)
    for label, value in (("unknown-model", ("--model", "nosuch")), ("sizes-junk", ("--sizes", "junk")),
                         ("sizes-negative", ("--sizes", "seq=-1")), ("sizes-unknown", ("--sizes", "colour=3")),
                         ("precision-unknown", ("--precision", "fp8")), ("strategy-unknown", ("--strategy", "nosuch")),
                         ("framework-unknown", ("--framework", "jax")), ("optimizer-unknown", ("--optimizer", "lion")),
                         ("network-unknown", ("--network", "carrier-pigeon")), ("scaling-unknown", ("--scaling", "x"))):
        add(f"predict-{label}", *PREDICT, *value)
    for label, value in (("unknown-device", "nosuch:8"), ("zero", "h100:0"), ("negative", "h100:-1"),
                         ("word", "h100:x"), ("empty", ""), ("zero-nodes", "h100:2x0"), ("escape", "\x1b:8")):
        add(f"predict--to-{label}", "predict", "--model", "resnet50", "--base", "h100:1=1000@64", "--to", value)
    for label, value in (("junk", "junk"), ("nan", "h100:1=nan"), ("negative", "h100:1=-5"), ("zero", "h100:1=0"),
                         ("batch-zero", "h100:1=1000@0"), ("ref-unknown", "ref:nosuch:1"), ("empty", "")):
        add(f"predict--base-{label}", "predict", "--model", "resnet50", "--to", "h100:8", "--base", value)
    add("predict-no-base", "predict", "--to", "h100:8")
    add("predict--from-missing", "predict", "--to", "h100:8", "--from", "nope")
    add("predict--from-no-match", "predict", "--to", "h100:8", "--from", "results")
    add("predict--prices-missing", *PREDICT, "--prices", "nope.toml")
    add("predict--catalogue-file-missing", *PREDICT, "--catalogue-file", "nope.toml")
    add("predict--catalogue-file-not-toml", *PREDICT, "--catalogue-file", "bad.toml", files={"bad.toml": "[[x\n"})
    add("predict--catalogue-file-empty", *PREDICT, "--catalogue-file", "empty.toml", files={"empty.toml": ""})
    for label, value in (("junk", "junk"), ("empty-object", "{}"), ("unknown-workload", '{"workload": "nosuch"}'),
                         ("unknown-id", "nosuch/torch/cpu:1/single/fp32"), ("list", "[1, 2]")):
        add(f"worker--case-{label}", "worker", "--case", value)
    case = "matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8"
    add("worker--timing-junk", "worker", "--case", case, "--timing", "junk")
    add("worker--timing-negative", "worker", "--case", case, "--timing", '{"budget_s": -1}')
    add("worker--timing-unknown", "worker", "--case", case, "--timing", '{"colour": 1}')
    return r


#: A pytest-benchmark file as `pytest --benchmark-json` writes it for a parbench case.
def pytest_benchmark(stats: dict[str, Any], case: dict[str, Any] | None = None, **extra: Any) -> str:
    case = case or {"workload": "matmul", "framework": "torch", "device": "cpu", "n_devices": 1,
                    "strategy": "single", "precision": "fp32", "params": {"m": 8, "n": 8, "k": 8}}
    benchmark = {"name": "test_case[matmul]", "fullname": "tests/x.py::test_case[matmul]", "params": None,
                 "stats": {"min": 1e-6, "max": 2e-6, "mean": 1.5e-6, "stddev": 1e-7, "rounds": 10, "median": 1.5e-6,
                           "iqr": 1e-7, "q1": 1.4e-6, "q3": 1.6e-6, "iterations": 1, "ops": 6e5,
                           "data": [1.5e-6] * 10, **stats},
                 "extra_info": {"case": case, "status": "ok"}}
    data = {"machine_info": {"node": "pb", "machine": "x86_64", "cpu": {"brand_raw": "cpu"}},
            "commit_info": {"id": "abc"}, "benchmarks": [benchmark], "datetime": "2026-01-01T00:00:00",
            "version": "5.1.0", **extra}
    return json.dumps(data)


def asv_results(**replaced: Any) -> str:
    data = {"commit_hash": "abc123", "env_name": "virtualenv-py3.11", "date": 1700000000000, "python": "3.11",
            "params": {"machine": "box", "cpu": "cpu", "num_cpu": "2", "ram": "16000000", "os": "Linux"},
            "requirements": {}, "result_columns": ["result", "params", "version", "started_at", "duration"],
            "results": {"suites_asv.Matmul.time_case": [[1e-6], [["'matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8'"]],
                                                        "v1", 1700000000000, 1.0]},
            "durations": {}, "version": 2, **replaced}
    return json.dumps(data)


def bent(**changes: Any) -> Setup:
    """A setup that appends the fixture's first record with `changes` (dotted keys) as a new line of
    a records file beside the good one."""
    def setup(fixture: Fixture) -> None:
        record = json.loads(json.dumps(fixture.record))
        record["run_id"] = "bent"
        for dotted, value in changes.items():
            node = record
            *parents, last = dotted.split(".")
            for part in parents:
                node = node[part]
            if value is DROP:
                node.pop(last, None)
            else:
                node[last] = value
        (fixture.root / "results" / "records-bent.jsonl").write_text(json.dumps(record) + "\n")
    return setup


DROP = object()


def raw_record(text: Callable[[str], bytes]) -> Setup:
    """A setup that writes a records file from the fixture's first record line, as bytes `text` makes of it."""
    def setup(fixture: Fixture) -> None:
        line = json.dumps(dict(fixture.record, run_id="bent"))
        (fixture.root / "results" / "records-bent.jsonl").write_bytes(text(line))
    return setup


def rewrite_records(text: Callable[[bytes], bytes]) -> Setup:
    """A setup that rewrites results/'s own records file (a BOM, CRLF line ends)."""
    def setup(fixture: Fixture) -> None:
        path = fixture.root / fixture.records
        path.write_bytes(text(path.read_bytes()))
    return setup


def gzipped_records(fixture: Fixture) -> None:
    path = fixture.root / fixture.records
    (fixture.root / "gz").mkdir()
    (fixture.root / "gz" / "records-box.jsonl.gz").write_bytes(gzip.compress(path.read_bytes()))


def records_rows() -> list[Row]:
    """Records and foreign result files beside good records: the report goes on and says one line
    naming the bad file (`warn`), or reads valid oddities whole (`ok`)."""
    r = []

    def add(name: str, what: str, expect: str = WARN, argv: tuple[str, ...] = REPORT, **more: Any) -> None:
        r.append(Row(name, "records", argv, expect=expect, what=what, **more))

    add("bom", "records file starting with a UTF-8 byte-order mark", OK,
        setup=rewrite_records(lambda b: b"\xef\xbb\xbf" + b))
    add("bom-compare", "records file with a BOM, compared", OK, argv=("compare", "results", "other"),
        setup=rewrite_records(lambda b: b"\xef\xbb\xbf" + b))
    add("crlf", "records file with CRLF line ends", OK, setup=rewrite_records(lambda b: b.replace(b"\n", b"\r\n")))
    add("gz", "gzipped records (records-box.jsonl.gz)", OK, argv=("report", "gz", "-o", "out"), setup=gzipped_records)
    add("gz-corrupt", "records-x.jsonl.gz that is not gzip", files={"results/records-x.jsonl.gz": b"not gzip"})
    add("gz-truncated", "gzipped records cut in half",
        setup=lambda f: (f.root / "results" / "records-x.jsonl.gz").write_bytes(
            gzip.compress((f.root / f.records).read_bytes())[:40]))
    add("truncated-line", "a record cut mid-line", setup=raw_record(lambda line: line[: len(line) // 2].encode()))
    add("garbage-line", "a line of text in a records file", files={"results/records-x.jsonl": "hello world\n"})
    add("binary", "binary bytes named records-x.jsonl", files={"results/records-x.jsonl": bytes(range(256)) * 4})
    add("latin1", "a Latin-1 line", files={"results/records-x.jsonl": '{"caf\xe9": 1}\n'.encode("latin-1")})
    add("array-line", "a JSON array as a record", files={"results/records-x.jsonl": "[1, 2, 3]\n"})
    add("number-line", "a bare number as a record", files={"results/records-x.jsonl": "42\n"})
    add("deep-json", "JSON nested 100000 deep", files={"results/records-x.jsonl": "[" * 100000 + "]" * 100000 + "\n"})
    add("nan-literal", "NaN literal in samples", setup=raw_record(
        lambda line: line.replace('"samples_s": [', '"samples_s": [NaN, ', 1).encode()))
    add("infinity-median", "Infinity as median_s", setup=bent(**{"measurement.median_s": float("inf")}))
    add("negative-median", "median_s -1", setup=bent(**{"measurement.median_s": -1.0}))
    add("string-median", "median_s \"fast\"", setup=bent(**{"measurement.median_s": "fast"}))
    add("samples-strings", "samples_s of strings", setup=bent(**{"measurement.samples_s": ["a", "b"]}))
    add("n-devices-negative", "case.n_devices -4", setup=bent(**{"case.n_devices": -4}))
    add("n-devices-string", "case.n_devices \"two\"", setup=bent(**{"case.n_devices": "two"}))
    add("case-string", "case a string", setup=bent(case="matmul"))
    add("case-missing", "no case", setup=bent(case=DROP))
    add("status-unknown", "status \"great\"", setup=bent(status="great"))
    add("status-number", "status 42", setup=bent(status=42))
    add("schema-future", "schema 99", setup=bent(schema=99))
    add("schema-string", "schema \"3\"", setup=bent(schema="3"))
    add("timestamp-junk", "timestamp \"yesterday\"", setup=bent(timestamp="yesterday"))
    add("ok-without-measurement", "status ok, no measurement", setup=bent(measurement=None))
    add("workload-unknown", "case.workload \"nosuch\"", setup=bent(**{"case.workload": "nosuch"}))
    add("device-unknown", "case.device \"quantum\"", setup=bent(**{"case.device": "quantum"}))
    add("environment-list", "environment a list", setup=bent(environment=[1]))
    add("fifo", "a FIFO named records-x.jsonl", files={"results/records-x.jsonl": Fifo()})
    add("folder", "a folder named records-x.jsonl", files={"results/records-x.jsonl/.keep": ""})
    add("symlink-loop", "a symlink loop named records-x.jsonl",
        files={"results/records-x.jsonl": Link("records-x.jsonl")})
    add("symlink-dangling", "a dangling symlink named records-x.jsonl", files={"results/records-x.jsonl": Link("gone")})
    add("fifo-json", "a FIFO named x.json", files={"results/x.json": Fifo()})
    add("empty-json", "an empty x.json", files={"results/x.json": ""})
    add("json-list", "x.json holding a list", files={"results/x.json": "[1, 2]"})
    add("json-garbage", "x.json that is not JSON", files={"results/x.json": "{not json"})
    add("calibration-garbage", "calibration.json that is not JSON, read by a run", argv=RUN,
        files={"results/calibration.json": "{"})
    for name, stats, what in (("median-negative", {"median": -1}, "median -1"),
                              ("mean-string", {"mean": "fast"}, "mean \"fast\""),
                              ("median-missing", {"median": None}, "median null"),
                              ("data-nan", {"data": [float("nan")] * 3}, "data NaN"),
                              ("rounds-zero", {"rounds": 0, "data": []}, "no rounds")):
        add(f"pytest-benchmark-{name}", f"pytest-benchmark JSON with {what}",
            files={"results/bench.json": pytest_benchmark(stats)})
    add("pytest-benchmark-n-devices-negative", "pytest-benchmark JSON whose case has n_devices -4",
        files={"results/bench.json": pytest_benchmark({}, case={"workload": "matmul", "framework": "torch",
                                                                 "device": "cpu", "n_devices": -4,
                                                                 "strategy": "single", "precision": "fp32",
                                                                 "params": {"m": 8, "n": 8, "k": 8}})})
    add("pytest-benchmark-no-case", "pytest-benchmark JSON of another project (no parbench case)",
        files={"results/bench.json": json.dumps({"machine_info": {}, "benchmarks": [
            {"name": "test_x", "stats": {"median": 1e-3}, "extra_info": {}}]})})
    add("pytest-benchmark-benchmarks-dict", "pytest-benchmark JSON whose benchmarks is no list",
        files={"results/bench.json": json.dumps({"machine_info": {}, "benchmarks": {"a": 1}})})
    add("asv-results-not-dict", "asv results whose results is a list",
        files={"results/asv/box/abc.json": asv_results(results=[1, 2])})
    add("asv-columns-missing", "asv results without result_columns",
        files={"results/asv/box/abc.json": asv_results(result_columns=None)})
    add("asv-result-nan", "asv results holding NaN", files={"results/asv/box/abc.json": asv_results().replace(
        "[[1e-06]]", "[[NaN]]")})
    add("asv-result-string", "asv results holding a string", files={"results/asv/box/abc.json": asv_results().replace(
        "[[1e-06]]", '[["fast"]]')})
    add("asv-benchmarks-garbage", "asv benchmarks.json that is not JSON",
        files={"results/asv/box/abc.json": asv_results(), "results/asv/benchmarks.json": "{"})
    add("only-bad-file", "a report over one file that is no results", REFUSE, argv=("report", "bad.jsonl", "-o", "out"),
        files={"bad.jsonl": "hello\n"})
    add("compare-bad-file", "compare against a file that is no results", REFUSE,
        argv=("compare", "results", "bad.jsonl"),
        files={"bad.jsonl": "hello\n"})
    add("compare-fifo", "compare against a FIFO", REFUSE, argv=("compare", "results", "pipe.jsonl"),
        files={"pipe.jsonl": Fifo()})
    add("memory-truncated", "memory over a records file with a cut line",
        argv=("memory", "--results", "results"), setup=raw_record(lambda line: line[:50].encode()), expect=REFUSE)
    return r


def env_rows() -> list[Row]:
    """Every PARBENCH_* knob with junk, through a command that reads it."""
    bad: list[tuple[str, str, tuple[str, ...]]] = [
        ("PARBENCH_MACHINE", "a/b", RUN), ("PARBENCH_MACHINE", "m" * 300, RUN), ("PARBENCH_MACHINE", "box\nrm", RUN),
        ("PARBENCH_PLUGINS", "nosuch_module_x", RUN), ("PARBENCH_PLUGINS", "json", RUN),
        ("PARBENCH_PLUGINS", "nope.py", ("list", "--suite", "tiny.toml")),
        ("PARBENCH_ROTATION_BYTES", "abc", RUN), ("PARBENCH_ROTATION_BYTES", "1e20", RUN),
        ("PARBENCH_ROTATION_BYTES", "-1", RUN),
        ("PARBENCH_THREADS", "lots", RUN), ("PARBENCH_THREADS", "0", RUN), ("PARBENCH_THREADS", "-2", RUN),
        ("PARBENCH_CPUS", "one", RUN), ("PARBENCH_CPUS", "99", RUN), ("PARBENCH_CPUS", "-1", RUN),
        ("PARBENCH_CASE_ROOT", "1", RUN), ("PARBENCH_CASE_ROOT", "abc", RUN), ("PARBENCH_CASE_ROOT", "999999999", RUN),
        ("PARBENCH_RENDEZVOUS_TIMEOUT_S", "nan", RUN), ("PARBENCH_RENDEZVOUS_TIMEOUT_S", "-5", RUN),
        ("PARBENCH_RENDEZVOUS_TIMEOUT_S", "abc", RUN),
        ("PARBENCH_CASE_TIMEOUT_S", "nan", RUN), ("PARBENCH_CASE_TIMEOUT_S", "0", RUN),
        ("PARBENCH_CASE_TIMEOUT_S", "abc", RUN),
        ("PARBENCH_REFERENCE_FLOP_BUDGET", "abc", RUN), ("PARBENCH_REFERENCE_FLOP_BUDGET", "-1", RUN),
        ("PARBENCH_REFERENCE_FLOP_BUDGET", "inf", RUN),
        ("PARBENCH_PEAKS", "nope.toml", RUN), ("PARBENCH_PEAKS", "results", RUN),
        ("PARBENCH_PEAKS", "bad.toml", RUN),
        ("PARBENCH_PRICES", "nope.toml", REPORT), ("PARBENCH_PRICES", "bad.toml", REPORT),
        ("PARBENCH_PRICES", "nope.toml", PREDICT),
        ("PARBENCH_REFERENCES", "nope.toml", REPORT), ("PARBENCH_REFERENCES", "bad.toml", REPORT),
        ("PARBENCH_REHEARSAL", "banana", RUN), ("PARBENCH_REHEARSAL", "2", RUN),
        ("PARBENCH_INJECT_FAULT", "junk", RUN), ("PARBENCH_INJECT_FAULT", "not_all_reduced\n", RUN),
        ("PARBENCH_TF_SLURM_PORT", "0", RUN), ("PARBENCH_TF_SLURM_PORT", "70000", RUN),
        ("PARBENCH_TF_SLURM_PORT", "abc", RUN),
    ]  # PARBENCH_NODE and PARBENCH_TPU_PLUGGABLE_DEVICE_LIBRARY: set by parbench in processes it starts
    rows, seen = [], {}
    for name, value, argv in bad:
        label = value if value.isalnum() and len(value) < 20 else "long" if len(value) > 100 else \
            {"a/b": "slash", "1e20": "1e20", "-1": "negative", "-2": "negative", "-5": "negative",
             "nope.toml": "missing", "bad.toml": "not-toml", "nope.py": "missing-file"}.get(value, "control")
        key = f"{name}-{label}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key}-{argv[0]}"
        rows.append(Row(f"env-{key}", "env", argv, env={name: value}, files={"bad.toml": "[[x\n"}))
    return rows


def toml_rows() -> list[Row]:
    """Grid, price, reference, peaks and catalogue files that are bent."""
    grid = TINY_GRID
    grids = {
        "bom": "\ufeff" + grid, "not-utf8": grid.encode("utf-16"), "invalid": "[[grid\n", "empty": "",
        "grid-not-array": 'grid = "matmul"\n', "grid-empty-array": "grid = []\n",
        "workload-missing": grid.replace('workload = "matmul"\n', ""),
        "workload-unknown": grid.replace('"matmul"', '"nosuch"'),
        "framework-unknown": grid.replace('"torch"', '"jax"'), "device-unknown": grid.replace('"cpu"', '"quantum"'),
        "unknown-top-key": "colour = 1\n" + grid, "unknown-grid-key": grid + "colour = 1\n",
        "param-string": grid.replace("m = 8", 'm = "x"'), "param-negative": grid.replace("m = 8", "m = -8"),
        "param-zero": grid.replace("m = 8", "m = 0"), "param-huge": grid.replace("m = 8", "m = 1000000000000"),
        "param-float": grid.replace("m = 8", "m = 8.5"), "param-unknown": grid.replace("m = 8", "m = 8, colour = 1"),
        "n-devices-negative": grid + "n_devices = -1\n", "n-devices-huge": grid + "n_devices = 1000000000\n",
        "precision-unknown": grid + 'precision = "fp8"\n', "strategy-unknown": grid + 'strategy = "nosuch"\n',
        "budget-string": grid.replace("budget_s = 0.2", 'budget_s = "fast"'),
        "budget-negative": grid.replace("budget_s = 0.2", "budget_s = -1"),
        "timing-unknown": grid.replace("budget_s = 0.2", "budget_s = 0.2\ncolour = 1"),
        "min-samples-fraction": grid.replace("budget_s = 0.2", "budget_s = 0.2\nmin_samples = 1.5"),
        "max-below-min": grid.replace("budget_s = 0.2", "budget_s = 0.2\nmin_samples = 10\nmax_samples = 5"),
        "timing-not-table": 'timing = 3\n' + grid.replace("[timing]\nbudget_s = 0.2\n", ""),
    }
    valid = {"bom": OK, "param-huge": "control", "n-devices-huge": "control"}  # listed; a run says unavailable
    rows = [Row(f"grid-{name}", "toml", ("list", "--suite", "g.toml"), files={"g.toml": text},
                expect=OK if name in valid else REFUSE, control=valid.get(name) == "control")
            for name, text in grids.items()]
    rows += [Row(f"grid-{name}-run", "toml", ("run", "--suite", "g.toml", "--results", "results"),
                 files={"g.toml": grids[name]}, expect=valid.get(name, REFUSE))
             for name in ("bom", "param-negative", "min-samples-fraction")]
    rows += [Row("grid-fifo", "toml", ("list", "--suite", "g.toml"), files={"g.toml": Fifo()}),
             Row("grid-folder", "toml", ("list", "--suite", "g.toml"), files={"g.toml/.keep": ""})]
    prices = {
        "bom": '\ufeffversion = 1\n', "invalid": "[[x\n", "version-99": "version = 99\n",
        "version-string": 'version = "one"\n', "unknown-table": "[colour]\nred = 1\n",
        "price-negative": '[[price]]\ndevice = "H100"\nusd_per_hour = -2.0\n',
        "price-string": '[[price]]\ndevice = "H100"\nusd_per_hour = "cheap"\n',
        "price-nan": '[[price]]\ndevice = "H100"\nusd_per_hour = nan\n',
        "price-huge": '[[price]]\ndevice = "H100"\nusd_per_hour = 1e308\n', "empty": "",
    }
    rows += [Row(f"prices-{name}", "toml", (*REPORT, "--prices", "p.toml"), files={"p.toml": text},
                 expect=OK if name in ("bom", "empty") else REFUSE) for name, text in prices.items()]
    references = {
        "invalid": "[[x\n", "unknown-key": "colour = 1\n", "bom": "\ufeffcolour = 1\n",
        "row-negative": '[[reference]]\nmodel = "resnet50"\ndevice = "H100"\nn_devices = 1\nprecision = "bf16"\n'
                        'samples_per_s = -5\n',
        "row-string": '[[reference]]\nmodel = "resnet50"\ndevice = "H100"\nn_devices = "one"\n',
    }
    rows += [Row(f"references-{name}", "toml", (*REPORT, "--references", "r.toml"), files={"r.toml": text})
             for name, text in references.items()]
    peaks = {"invalid": "[[x\n", "negative": '[H100]\nfp32 = -1\n', "string": '[H100]\nfp32 = "fast"\n',
             "nan": "[H100]\nfp32 = nan\n"}
    rows += [Row(f"peaks-{name}", "toml", RUN, env={"PARBENCH_PEAKS": "k.toml"}, files={"k.toml": text})
             for name, text in peaks.items()]
    catalogue = {"unknown-key": "colour = 1\n", "device-negative": '[[device]]\nname = "X"\nmemory_gib = -1\n'}
    rows += [Row(f"catalogue-{name}", "toml", (*PREDICT, "--catalogue-file", "c.toml"), files={"c.toml": text})
             for name, text in catalogue.items()]
    return rows


def output_rows() -> list[Row]:
    """Every file or folder a command writes, pointed somewhere it cannot or must not write."""
    writers = {
        "run--results": lambda where: ("run", "--suite", "tiny.toml", "--results", where),
        "calibrate--results": lambda where: ("calibrate", "--results", where, "--sizes", "64"),
        "report-o": lambda where: ("report", "results", "-o", where),
        "slurm--script": lambda where: ("slurm", "--nodes", "1", "--suite", "tiny.toml", "--script", where),
        "worker--out": lambda where: ("worker", "--case", "matmul/torch/cpu:1/single/fp32/k=8,m=8,n=8",
                                      "--timing", '{"budget_s": 0.2}', "--out", where),
    }
    places = {"file-in-path": "tiny.toml/sub", "empty": "", "proc": "/proc/parbench-x/y",
              "onto-records": "@records", "onto-grid": "tiny.toml", "missing-folder": "no/such/folder/x",
              "onto-folder": "results"}
    rows = []
    for writer, argv in writers.items():
        for place, where in places.items():
            if writer in ("run--results", "calibrate--results", "report-o") and place in ("onto-folder",
                                                                                          "missing-folder"):
                continue  # a folder these write into (made where missing)
            rows.append(Row(f"out-{writer}-{place}", "output", argv(where)))
    rows += [Row("out-slurm--script-dev-full", "output", writers["slurm--script"]("/dev/full")),
             Row("out-report-o-dev-full", "output", writers["report-o"]("/dev/full")),
             Row("out-slurm--script-onto-run-summary", "output", writers["slurm--script"]("@summary"))]
    return rows


def slurm_rows() -> list[Row]:
    base = ("slurm", "--nodes", "2", "--suite", "tiny.toml")
    values = {
        "partition-newline": ("--partition", "gpu\nsrun rm -rf ~"), "partition-space": ("--partition", "gpu part"),
        "partition-hash": ("--partition", "gpu#x"), "partition-semicolon": ("--partition", "a;b"),
        "partition-subshell": ("--partition", "$(id)"), "partition-empty": ("--partition", ""),
        "time-word": ("--time", "abc"), "time-negative": ("--time", "-1"),
        "time-huge": ("--time", "99999999"), "time-bad-clock": ("--time", "1:99:99"),
        "time-newline": ("--time", "10\n#SBATCH --x"), "filter-no-match": ("--filter", "zzz-no-such-case"),
        "label-newline": ("--label", "a\nb"), "label-slash": ("--label", "a/b"), "suite-unknown": ("--suite", "nosuch"),
        "suite-newline": ("--suite", "tiny\n.toml"), "submit-without-script": ("--submit",),
        "force-without-script": ("--force",), "submit-no-sbatch": ("--submit", "--script", "job.sh"),
        "results-newline": ("--results", "res\nults"),
    }
    rows = [Row(f"slurm-{name}", "slurm", (*base, *value)) for name, value in values.items()]
    rows.append(Row("slurm-partition-long", "slurm", (*base, "--partition", LONG), expect=OK, control=True))
    rows.append(Row("slurm-script-over-user-file", "slurm", (*base, "--script", "mine.sh"),
                    files={"mine.sh": "#!/bin/sh\necho my own script\n"}))
    rows.append(Row("slurm-cwd-percent", "slurm", ("slurm", "--nodes", "1", "--suite", "../tiny.toml"),
                    files={"w%j/.keep": ""}, cwd="w%j", what="run from a folder named w%j"))
    rows.append(Row("slurm-cwd-space", "slurm", ("slurm", "--nodes", "1", "--suite", "../tiny.toml"), expect=OK,
                    files={"w x/.keep": ""}, cwd="w x", what="run from a folder named 'w x' (the output path quoted)"))
    return rows


def process_rows() -> list[Row]:
    """Signals early in `list` and `run`, closed or full stdout, two runs into one folder."""
    return [
        Row("signal-list-sigterm", "signal", ("list", "--suite", "tiny.toml"), signal=(signal.SIGTERM, 0.3)),
        Row("signal-list-sigint", "signal", ("list", "--suite", "tiny.toml"), signal=(signal.SIGINT, 0.3)),
        Row("signal-list-sigint-import", "signal", ("list", "--suite", "tiny.toml"), signal=(signal.SIGINT, 0.05)),
        Row("signal-run-sigterm", "signal", RUN, signal=(signal.SIGTERM, 3.0)),
        Row("signal-run-sigint", "signal", RUN, signal=(signal.SIGINT, 3.0)),
        Row("signal-run-sighup", "signal", RUN, signal=(signal.SIGHUP, 3.0)),
        Row("signal-report-sigterm", "signal", REPORT, signal=(signal.SIGTERM, 1.5)),
        Row("stdout-closed-list", "stdout", ("list", "--suite", "tiny.toml"), expect=WARN, stdout="closed"),
        Row("stdout-closed-run", "stdout", RUN, expect=WARN, stdout="closed"),
        Row("stdout-closed-report", "stdout", REPORT, expect=WARN, stdout="closed"),
        Row("stdout-full-list", "stdout", ("list",), stdout="full"),
        Row("stdout-full-slurm", "stdout", ("slurm", "--nodes", "1", "--suite", "tiny.toml"), stdout="full"),
        Row("stdout-full-compare", "stdout", ("compare", "results", "other"), stdout="full"),
        Row("stdout-full-predict", "stdout", ("predict", "--catalogue"), stdout="full"),
        Row("concurrent-runs", "concurrency", RUN, expect=OK, twice=True,
            what="two runs into one results folder at once: both stored"),
        Row("concurrent-reports", "concurrency", REPORT, expect=OK, twice=True,
            what="two reports into one folder at once"),
    ]


def framework_rows() -> list[Row]:
    """Where a framework reads the input itself: asv with a broken asv.conf.json."""
    return [Row("asv-conf-broken", "framework", ("check", "--config", "asv.conf.json"), program=("asv",),
                files={"asv.conf.json": "{not json"}, what="asv check with an asv.conf.json that is not JSON")]


def control_rows() -> list[Row]:
    return [Row("control-list", "control", ("list", "--suite", "tiny.toml"), expect=OK, control=True),
            Row("control-run", "control", RUN, expect=OK, control=True),
            Row("control-report", "control", REPORT, expect=OK, control=True),
            Row("control-compare", "control", ("compare", "results", "other"), expect=OK, control=True),
            Row("control-slurm", "control", ("slurm", "--nodes", "2", "--suite", "tiny.toml", "--script", "job.sh"),
                expect=OK, control=True)]


def all_rows() -> list[Row]:
    rows = [*number_rows(), *text_rows(), *records_rows(), *env_rows(), *toml_rows(), *output_rows(),
            *slurm_rows(), *process_rows(), *framework_rows(), *control_rows()]
    ids = [row.id for row in rows]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    return rows


# --- running a row --------------------------------------------------------------------------------------

@dataclass
class Outcome:
    id: str
    area: str
    input: str
    expect: str
    control: bool
    cls: str
    rc: int | None
    seconds: float
    lines: int
    first: str  # stderr's first non-empty line (or the traceback's last), shortened


def shown(value: str, limit: int = 40) -> str:
    text = value.encode("unicode_escape").decode("ascii")
    if len(text) > limit:
        text = f"{text[:limit // 2]}...({len(value)} chars)"
    return text if text and " " not in text else f"'{text}'"


def described(row: Row) -> str:
    env = " ".join(f"{k}={shown(v)}" for k, v in row.env.items())
    command = " ".join(shown(arg) for arg in row.argv)
    program = " ".join(row.program) or "parbench"
    text = f"{env + ' ' if env else ''}{program} {command}".strip()
    if row.stdout != "pipe":
        text += " >&-" if row.stdout == "closed" else " >/dev/full"
    if row.signal:
        text += f" ({signal.Signals(row.signal[0]).name} at {row.signal[1]} s)"
    return f"{row.what}: {text}" if row.what else text


def snapshot(root: Path) -> dict[str, bytes]:
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                files[str(path.relative_to(root))] = path.read_bytes()
    return files


def lost(before: dict[str, bytes], root: Path) -> bool:
    """A file that was there is gone, or changed other than by an appended tail."""
    for name, content in before.items():
        path = root / name
        try:
            now = path.read_bytes() if path.is_file() else None
        except OSError:
            now = None
        if now is None or not now.startswith(content):
            return True
    return False


def make_files(root: Path, files: dict[str, str | bytes | Special], fixture: Fixture) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Fifo):
            os.mkfifo(path)
        elif isinstance(content, Folder):
            path.mkdir()
        elif isinstance(content, Link):
            path.symlink_to(content.target)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def placed(arg: str, fixture: Fixture) -> str:
    if arg == "@records":
        return str(fixture.records)
    if arg == "@summary":
        return str(next((fixture.root / "results").rglob("runs/*.json")).relative_to(fixture.root))
    return arg


def traceback_in(err: str) -> bool:
    return "Traceback (most recent call last)" in err or "Fatal Python error" in err


def classify(row: Row, rc: int | None, err: str, gone: bool) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    if rc is None:
        return "hang"
    if gone:
        return "lost"
    if traceback_in(err):
        return "traceback"
    if row.expect == OK:
        if rc == 0 and not lines:
            return "clean"
        if any("skipped" in line for line in lines):
            return "lost"  # a valid record left out of what it reads
        return "multi-line" if rc == 0 else "wrong"
    if row.expect == WARN:
        return "clean" if len(lines) == 1 else "silent" if not lines else "multi-line"
    if rc == 0 or not lines:
        return "silent"
    return "clean" if len(lines) == 1 else "multi-line"


def absent(row: Row, err: str) -> bool:
    """Whether the tree refused the row only for lacking its command or option (a later feature)."""
    return bool(row.argv) and (f"invalid choice: '{row.argv[0]}'" in err or "unrecognized arguments: --" in err
                               and not any("bogus" in arg for arg in row.argv))


def run_row(row: Row, tree: Path, fixture_dir: Path, knobs_here: set[str]) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="hostile-") as temp:
        root = Path(temp) / "w"
        shutil.copytree(fixture_dir, root, symlinks=True)
        records = next((root / "results").rglob("records-*.jsonl")).relative_to(root)
        fixture = Fixture(root, json.loads((root / records).read_text().splitlines()[0]), records)
        make_files(root, row.files, fixture)
        if row.setup:
            row.setup(fixture)
        before = snapshot(root)
        cwd = root / row.cwd
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARBENCH_")}
        env.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1", **row.env)
        argv = [placed(arg, fixture) for arg in row.argv]
        command = [*row.program, *argv] if row.program else [sys.executable, "-m", "suites", *argv]
        started = time.monotonic()
        rc, err = execute(row, command, cwd, env)
        seconds = time.monotonic() - started
        # two runs at once: the fixture's run and both of theirs must be stored
        dropped = row.twice and row.argv[0] == "run" and rc == 0 and stored_runs(root / "results") < 3
        cls = classify(row, rc, err, lost(before, root) or dropped)
        unknown_knob = any(name not in knobs_here for name in row.env if name.startswith("PARBENCH_"))
        if cls != "clean" and (absent(row, err) or (unknown_knob and cls == "silent")):
            cls = "absent"
    lines = [line for line in err.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(" ")][-1:] if traceback_in(err) else lines[:1]
    return Outcome(row.id, row.area, described(row), row.expect, row.control, cls, rc, round(seconds, 1),
                   len(lines), "".join(said).strip()[:200])


def stored_runs(results: Path) -> int:
    """The runs whose records `results` holds (the runs label them by the hostname, the fixture "box")."""
    return len({json.loads(line)["run_id"] for path in results.rglob("records-*.jsonl")
                for line in path.read_text().splitlines() if line.strip()})


def execute(row: Row, command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int | None, str]:
    """The command's exit code (None where it passed the time limit) and its stderr."""
    def start() -> subprocess.Popen[bytes]:
        stdout: Any = subprocess.PIPE
        if row.stdout == "full":
            stdout = open("/dev/full", "wb")  # noqa: SIM115 - closed when the child ends
        full = ["bash", "-c", 'exec "$@" >&-', "bash", *command] if row.stdout == "closed" else command
        return subprocess.Popen(full, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=subprocess.PIPE, start_new_session=True)

    processes = [start() for _ in range(2 if row.twice else 1)]
    if row.signal:
        time.sleep(row.signal[1])
        processes[0].send_signal(row.signal[0])
    rc: int | None = 0
    err = ""
    for process in processes:
        try:
            _, stderr = process.communicate(timeout=TIMEOUT_S)
            err += stderr.decode(errors="replace")
            if rc is not None:
                rc = process.returncode if rc == 0 else rc
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            err += process.communicate()[1].decode(errors="replace")
            rc = None
    return rc, err


def make_fixture(tree: Path, folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "tiny.toml").write_text(TINY_GRID)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARBENCH_")}
    env.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    for results, label in (("results", "box"), ("other", "other")):
        subprocess.run([sys.executable, "-m", "suites", "run", "--suite", "tiny.toml", "--results", results,
                        "--label", label], cwd=folder, env=env, check=True, capture_output=True, timeout=600)


def tree_knobs(tree: Path) -> set[str]:
    code = "import json\ntry:\n from suites import knobs\n print(json.dumps(sorted(knobs.KNOBS)))\n" \
           "except Exception:\n print('[]')"
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/",
                         check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def sweep(tree: Path, out: Path, only: str, jobs: int) -> None:
    rows = [row for row in all_rows() if any(fnmatch.fnmatch(row.id, glob) for glob in only.split(","))]
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory(prefix="hostile-fixture-") as temp:
        fixture = Path(temp) / "fixture"
        make_fixture(tree, fixture)
        knobs_here = tree_knobs(tree)
        done = 0

        def one(row: Row) -> Outcome:
            nonlocal done
            outcome = run_row(row, tree, fixture, knobs_here)
            done += 1
            print(f"[{done}/{len(rows)}] {outcome.cls:10} {outcome.seconds:5.1f}s {row.id}: {outcome.first[:90]}",
                  flush=True)
            return outcome

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(one, rows))
    out.write_text(json.dumps({"tree": str(tree), "commit": commit.strip(),
                               "rows": [asdict(o) for o in outcomes]}, indent=1))


# --- the table ------------------------------------------------------------------------------------------

def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'").replace("\n", " ")


def table(before_file: Path, after_file: Path) -> str:
    before = {row["id"]: row for row in json.loads(before_file.read_text())["rows"]}
    before = {row_id: before.get(row_id, {"cls": "-"}) for row_id in (row.id for row in all_rows())}
    after_data = json.loads(after_file.read_text())
    after = after_data["rows"]
    hostile = [row for row in after if not row["control"]]
    counts = {side: {c: 0 for c in CLASSES} for side in ("before", "after")}
    for row in hostile:
        for side, cls in (("before", before[row["id"]]["cls"]), ("after", row["cls"])):
            counts[side][cls] = counts[side].get(cls, 0) + 1
    lines = [f"| class | before ({json.loads(before_file.read_text())['commit'][:7]}) | "
             f"after ({after_data['commit'][:7]}) |", "|---|---:|---:|"]
    lines += [f"| {c} | {counts['before'].get(c, 0)} | {counts['after'].get(c, 0)} |" for c in (*CLASSES, "-")
              if counts["before"].get(c) or counts["after"].get(c)]
    lines += [f"| **hostile rows** | {len(hostile)} | {len(hostile)} |", "",
              "| id | input | before | after | the line after (shortened) |", "|---|---|---|---|---|"]
    rows = {row.id: row for row in all_rows()}
    for row in after:
        mark = " (control)" if row["control"] else ""
        lines.append(f"| {row['id']}{mark} | {cell(described(rows[row['id']])[:160])} | {before[row['id']]['cls']} | "
                     f"{row['cls']} | {cell(row['first'][:140])} |")
    return "\n".join(lines) + "\n"


def merged(first: Path, then: Path, out: Path) -> None:
    """`first`'s outcomes with those `then` holds in their place (rows run again), kept in the
    order and set of the rows as they are now."""
    rows = {row["id"]: row for row in json.loads(first.read_text())["rows"]}
    data = json.loads(then.read_text())
    rows.update({row["id"]: row for row in data["rows"]})
    data["rows"] = [rows[row.id] for row in all_rows() if row.id in rows]
    out.write_text(json.dumps(data, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, help="the source tree whose `suites` package is swept")
    parser.add_argument("--out", type=Path, help="where the outcomes go (JSON)")
    parser.add_argument("--only", default="*", help="globs on the rows' ids, separated by commas")
    parser.add_argument("--jobs", type=int, default=2, help="rows at once (default 2: the machine is shared)")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    parser.add_argument("--merge", nargs=2, type=Path, metavar=("FIRST", "THEN"),
                        help="write to --out FIRST's outcomes with THEN's (rows run again) in their place")
    parser.add_argument("--table", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                        help="print the before/after Markdown table of two sweeps")
    args = parser.parse_args(argv)
    if args.list:
        rows = all_rows()
        for row in rows:
            print(f"{row.id}\t{row.area}\t{described(row)}")
        print(f"{sum(not row.control for row in rows)} hostile rows, {sum(row.control for row in rows)} controls",
              file=sys.stderr)
        return 0
    if args.merge and args.out:
        merged(*args.merge, args.out)
        return 0
    if args.table:
        print(table(*args.table), end="")
        return 0
    if not (args.tree and args.out):
        parser.error("give --tree and --out (or --table, or --list)")
    sweep(args.tree.resolve(), args.out, args.only, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
