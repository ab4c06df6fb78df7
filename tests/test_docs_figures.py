"""Figures the docs quote from shipped records are the records' figures (issue 46 item 10): a table of
(doc, quoted text with the figure as {}, record file, which record, how the figure is read); each
row reads the record, formats the figure as the doc writes it, and finds the text in the doc."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
H200 = "results/samples/h200-2026-11-26/records.jsonl"
Record = dict[str, Any]


def sustained_tflops(record: Record) -> float:
    """TFLOP/s over the whole timed span: the median step's figure x median / mean timed step."""
    measurement = record["measurement"]
    return record["metrics"]["tflops"] * measurement["median_s"] / measurement["sustained_step_s"]


def metric(name: str) -> Callable[[Record], float]:
    return lambda record: record["metrics"][name]


def evidence(name: str) -> Callable[[Record], float]:
    return lambda record: record["bound_by"]["evidence"][name]


#: (doc, quoted text, record file, the record's case fields and run-id suffix, its figure)
QUOTED = [
    ("docs/measured.md", "| 8192³ bf16 GEMM, `--budget 20` | {} TFLOP/s sustained", H200,
     {"workload": "matmul", "precision": "bf16", "m": 8192}, sustained_tflops),
    ("docs/measured.md", "({} at the median step)", H200, {"workload": "matmul", "precision": "bf16", "m": 8192},
     metric("tflops")),
    ("docs/measured.md", "(SM clock {} of 1,980 MHz, sw_power_cap)", H200,
     {"workload": "matmul", "precision": "bf16", "m": 8192}, evidence("sm_clock_mhz")),
    ("docs/measured.md", "| ResNet-50 fp32 batch 256 (standard suite) | {} img/s", H200,
     {"model": "resnet50", "precision": "fp32", "strategy": "single"}, metric("samples_per_s")),
    ("docs/measured.md", "fp32 {} vs", H200, {"model": "mlp", "precision": "fp32", "compile": "none", "run": "f65890"},
     metric("samples_per_s")),
    ("docs/measured.md", "vs {} samples/s (1.17×)", H200,
     {"model": "mlp", "precision": "fp32", "compile_mode": "reduce-overhead"}, metric("samples_per_s")),
    ("docs/measured.md", "bf16 {} vs", H200, {"model": "mlp", "precision": "bf16", "compile": "none"},
     metric("samples_per_s")),
    ("docs/measured.md", "vs {} (1.32×)", H200,
     {"model": "mlp", "precision": "bf16", "compile_mode": "reduce-overhead"}, metric("samples_per_s")),
    ("docs/measured.md", "ddp ResNet-50 {} img/s", H200, {"model": "resnet50", "strategy": "ddp"},
     metric("samples_per_s")),
    ("docs/measured.md", "fsdp ResNet-50 {} img/s", H200, {"model": "resnet50", "strategy": "fsdp"},
     metric("samples_per_s")),
]


def the_record(path: str, selector: dict[str, Any]) -> Record:
    records = [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]

    def matches(record: Record) -> bool:
        case, params = record["case"], record["case"]["params"]
        fields = {**params, **{key: case.get(key) for key in ("workload", "precision", "strategy", "compile")}}
        return all(record["run_id"].endswith(value) if key == "run" else fields.get(key) == value
                   for key, value in selector.items())
    (found,) = [record for record in records if matches(record)]
    return found


@pytest.mark.parametrize("doc, quoted, path, selector, figure", QUOTED, ids=[row[1][:40] for row in QUOTED])
def test_a_figure_quoted_in_the_docs_is_its_records(doc, quoted, path, selector, figure):
    value = figure(the_record(path, selector))
    text = quoted.format(f"{value:,.0f}")
    assert text in (ROOT / doc).read_text(), f"{doc} does not say {text!r} (the record: {value:,.1f})"
