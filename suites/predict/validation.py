"""The validation set (suites/predict/validation/*.toml) and its score: every row predicted with the
same model and catalogue as a user's projection, beside what was measured.

Rows: `[[row]]` throughput pairs (published 1 -> N GPU and node rows, one board from another, our own
H100 -> H200 records), `[[collective]]` nccl-tests bus bandwidths, `[[memory]]` recorded fits and OOMs
(from a record's per-sample figure, policy "memory", or from the spec's analytic count alone, "analytic"),
and, when the file is there, namespace_gloo.toml: a two-namespace gloo run over a rate-limited veth,
predicted from a one-rank record and the measured link (`namespace_rows`, a section of its own). The
summary per section: median and worst absolute error and the share of rows whose measured figure lies
in the band, over the rows measured without contention (the headline), and over every row beside it.
"""
from __future__ import annotations

import math
import statistics
import tomllib
from dataclasses import replace
from importlib import resources
from typing import Any

from suites.predict.alpha_beta import collective_seconds
from suites.predict.base import Base, parse_base
from suites.predict.catalogue import Catalogue
from suites.predict.memory import memory_per_device
from suites.predict.namespace_rows import namespace_rows
from suites.predict.projection import HOST_LOADER_MARGIN, HOST_MARGIN, Options, parse_target, project, topology
from suites.predict.workload import resolve_workload

#: The validation files, in suites/predict/validation/.
FILES = ("published.toml", "namespace_gloo.toml")


def load_rows() -> dict[str, list[dict[str, Any]]]:
    """Every row of the shipped files, by table; a file not there adds nothing."""
    folder = resources.files("suites.predict").joinpath("validation")
    tables: dict[str, list[dict[str, Any]]] = {"row": [], "collective": [], "memory": [], "gloo": []}
    for name in FILES:
        entry = folder.joinpath(name)
        if not entry.is_file():
            continue
        data = tomllib.loads(entry.read_text())
        key = "gloo" if name == "namespace_gloo.toml" else None
        for table, rows in data.items():
            if isinstance(rows, list):
                tables[key or table].extend(rows)
    return tables


def validate(catalogue: Catalogue) -> list[dict[str, Any]]:
    tables = load_rows()
    return ([throughput_row(row, catalogue) for row in tables["row"]]
            + [collective_row(row, catalogue) for row in tables["collective"]]
            + namespace_rows(tables["gloo"], HOST_MARGIN)
            + [memory_row(row, catalogue) for row in tables["memory"]])


def scored(row: dict[str, Any], predicted: float | None, low: float | None, high: float | None) -> dict[str, Any]:
    measured = row["measured"]
    out = {**row, "predicted": predicted, "band_low": low, "band_high": high}
    if predicted is not None:
        out["error"] = predicted / measured - 1
        out["inside"] = low is not None and low * (1 - 1e-9) <= measured <= high * (1 + 1e-9)
    return out


def throughput_row(row: dict[str, Any], catalogue: Catalogue) -> dict[str, Any]:
    workload = resolve_workload(row["model"], dict(row.get("sizes", {})), row["precision"], row["strategy"],
                                row["framework"], row.get("optimizer"))
    base = parse_base(row["base"], catalogue)
    target = parse_target(row["target"], catalogue)
    network = row.get("network", catalogue.default_fabric)
    scaling = "strong" if row["policy"] == "strong" else "weak"
    global_batch = row.get("global_batch")
    loader = row.get("input") == "host loader"
    options = Options(catalogue.fabric(network), network, scaling, global_batch, None, 4,
                      HOST_LOADER_MARGIN if loader else HOST_MARGIN)
    if row.get("accumulate"):
        # Gradient accumulation: the micro-batch is constant, one exchange per global batch; the step
        # projected is the accumulated one, global_batch / devices samples per device.
        base = replace(base, per_device_batch=global_batch // base.devices)
        options = replace(options, scaling="weak", batch=global_batch // target.devices, accumulated=True)
    projection = project(workload, base, target, options, catalogue)
    out = scored({**row, "measured": float(row["measured"])}, projection.samples_per_s,
                 *(projection.band or (None, None)))
    return {**out, "base": base.samples_per_s, "target": row["target"], "limited_by": projection.limited_by,
            "comparable": row.get("comparable", True),
            "note": row.get("note", "") + (f"; input through a host data loader, not priced: the band's slow end "
                                           f"{HOST_LOADER_MARGIN:.1%} (NVIDIA's DataLoader against DALI)"
                                           if loader else "")}


def collective_row(row: dict[str, Any], catalogue: Catalogue) -> dict[str, Any]:
    device = catalogue.device(row["device"])
    links = topology(device, row["devices"], 1, catalogue.fabric(catalogue.default_fabric), catalogue)
    seconds, algorithm = collective_seconds(row["op"], row["bytes"], links)
    factor = 2 * (row["devices"] - 1) / row["devices"]
    busbw = factor * row["bytes"] / seconds / 1e9
    out = scored({**row, "measured": row["measured_busbw_gbs"]}, busbw, busbw, busbw)
    out["inside"] = None  # one figure, no band: a datasheet link and NCCL's latencies
    return {**out, "policy": "collective", "base": None, "target": f"{row['devices']} x {device.label}",
            "note": f"busbw GB/s, {algorithm}, {row['bytes'] / 2**20:,.0f} MiB", "comparable": True}


def memory_row(row: dict[str, Any], catalogue: Catalogue) -> dict[str, Any]:
    workload = resolve_workload(row["model"], dict(row.get("sizes", {})), row["precision"], row["strategy"],
                                "torch", row.get("optimizer"))
    device = catalogue.device(row["device"])
    base = None
    if row.get("base_peak_bytes"):
        base = Base(row["device"], device, 1, 1, 1.0, int(row["base_batch"]), "measured", row["base_source"],
                    peak_memory_bytes=float(row["base_peak_bytes"]),
                    state_estimate_bytes=float(row["base_state_bytes"]))
    devices = int(row.get("devices", 1))
    memory = memory_per_device(workload, device, devices, int(row["per_device_batch"]), base)
    sharing = int(row.get("ranks_per_device", 1))
    needed = None if memory.per_device_bytes is None else memory.per_device_bytes * sharing
    fits = None if needed is None else needed <= device.memory_bytes
    agrees = None if fits is None else fits == (row["recorded"] == "ok")
    recorded_peak = row.get("recorded_peak_bytes")
    policy, section = (("memory", None) if base is not None else
                       ("analytic", "memory from the analytic count alone: peaks and fits against recorded runs"))
    return {**row, "policy": policy, "section": section, "base": None,
            "target": f"{device.label}, batch {row['per_device_batch']}",
            "measured": float(recorded_peak) if recorded_peak else math.nan, "predicted": memory.per_device_bytes,
            "error": (memory.per_device_bytes / recorded_peak - 1) if recorded_peak and memory.per_device_bytes
            else None, "inside": agrees, "band_low": None, "band_high": None, "comparable": True,
            "note": f"recorded {row['recorded']}, predicted {'fits' if fits else 'does not fit'} "
                    f"({(needed or 0) / 2**30:.1f} of {device.memory_bytes / 2**30:.1f} GiB)"}


def summary_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [abs(r["error"]) for r in rows if r.get("error") is not None]
    banded = [r["inside"] for r in rows if r.get("inside") is not None]
    return {"rows": len(rows),
            "median_abs_error": statistics.median(errors) if errors else None,
            "worst_abs_error": max(errors) if errors else None,
            "band_coverage": sum(banded) / len(banded) if banded else None}


def score(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per policy: rows, median_abs_error, worst_abs_error, band_coverage (memory: agreement of fits) over
    the comparable rows measured without contention; `contended_rows` and, where there are any,
    `with_contended`: the same over every comparable row."""
    summary: dict[str, dict[str, Any]] = {}
    for policy in sorted({row["policy"] for row in rows}):
        chosen = [r for r in rows if r["policy"] == policy and r.get("comparable", True)]
        quiet = [r for r in chosen if not r.get("contended")]
        summary[policy] = {**summary_of(quiet), "contended_rows": len(chosen) - len(quiet)}
        if len(quiet) < len(chosen):
            summary[policy]["with_contended"] = summary_of(chosen)
    return summary
