"""The throughput a projection starts from: measured records, a published figure on the command line,
or a row of suites/references.toml.

A base says which device ran it (a catalogue device type, or None: a CPU or a board not catalogued),
on how many devices and nodes, at which per-device batch, and how fast; from a record also its
peak memory and the state estimate beside it (for the activations a sample keeps), and whether its
devices were emulated. Every figure keeps its kind (measured, published) and source.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from suites.cases.user_files import shipped_table
from suites.errors import UserError
from suites.hardware.peaks import best_match
from suites.predict.catalogue import Catalogue, DeviceType
from suites.predict.workload import ProjectedWorkload
from suites.ranges import Range, Refused
from suites.records.record import Record
from suites.records.store import ResultsStore, load_records
from suites.workloads.training import SIZE_PARAMS

#: Devices in one node where a count alone is given (DGX and HGX boards hold 8).
GPUS_PER_NODE = 8
BASE_FORMAT = "DEVICE:N=THROUGHPUT[@PER_DEVICE_BATCH] (N may be GxK), e.g. \"H100 SXM:1=2789@256\""
#: A batch (per device or global) or a pipeline's micro-batches: whole and at least 1; the top only
#: stops a typo (ten digits of batch is past any device's memory for any model).
BATCH = Range(int, low=1, high=10**9, high_reason="past any device's memory")
#: Devices in one node of a `GxK` count: past any NVLink domain (an NVL72 rack's 72, an NVL576's 576).
PER_NODE = Range(int, low=1, high=1024, unit="devices per node", high_reason="past any node or NVLink domain")
#: Devices of a target or base in all (nodes are at most as many): a million is past any cluster built.
DEVICES = Range(int, low=1, high=10**6, unit="devices", high_reason="past any cluster built")
COUNT_FORMAT = "give N or GxK (G per node, K nodes), e.g. 8 or 8x2"


@dataclass(frozen=True)
class Spread:
    """The base's throughput relative to the figure taken, `low`..`high`, as measured (`how`): the quartiles
    of its step samples (its IQR) and the same case's throughput in other runs (run-to-run)."""

    low: float
    high: float
    how: str


def measured_spread(samples: list[float] | None, others: list[float], samples_per_s: float) -> Spread:
    """The spread of a measured base: the median step over its quartiles, widened to the throughputs of
    the same case in other runs (`others`)."""
    low, high, how = 1.0, 1.0, []
    if samples and len(samples) >= 4:
        q1, median, q3 = statistics.quantiles(samples, n=4)
        low, high = min(low, median / q3), max(high, median / q1)
        how.append(f"IQR {median / q3:.2f}-{median / q1:.2f}x")
    if others:
        low, high = min(low, min(others) / samples_per_s), max(high, max(others) / samples_per_s)
        how.append(f"{len(others)} other runs {min(others):,.0f}-{max(others):,.0f} samples/s")
    return Spread(low, high, "; ".join(how) or "no samples, no other runs")


@dataclass(frozen=True)
class Base:
    device_name: str
    device: DeviceType | None
    devices: int
    nodes: int
    samples_per_s: float
    per_device_batch: int | None
    kind: str
    source: str
    emulated: bool = False
    peak_memory_bytes: float | None = None
    state_estimate_bytes: float | None = None
    is_gpu: bool = True
    spread: Spread | None = None

    @property
    def per_node(self) -> int:
        return self.devices // self.nodes

    @property
    def step_s(self) -> float | None:
        """One step's seconds, where the batch is known."""
        if self.per_device_batch is None:
            return None
        return self.per_device_batch * self.devices / self.samples_per_s


def split_count(text: str, what: str) -> tuple[int, int]:
    """"8" -> (8, 1); "8x2" -> (16, 2): devices and nodes (a count over 8 fills nodes of 8)."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*", text)
    if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(2)) < 1):
        raise UserError(f"{what}: {text!r} is no device count; {COUNT_FORMAT}")
    per_node, nodes = int(match.group(1)), int(match.group(2) or 0)
    checks = [(per_node, PER_NODE), (per_node * nodes, DEVICES)] if nodes else [(per_node, DEVICES)]
    for count, bounds in checks:
        try:
            bounds.check(count)
        except Refused as error:
            raise UserError(f"{what}: {count} {bounds.unit} is too many: expected {error}; "
                            f"{COUNT_FORMAT}") from None
    if nodes:
        return per_node * nodes, nodes
    return per_node, max(1, math.ceil(per_node / GPUS_PER_NODE))


def parse_base(text: str, catalogue: Catalogue) -> Base:
    """`--base DEVICE:N=THROUGHPUT[@BATCH]`: a published figure (samples/s of all N devices)."""
    match = re.fullmatch(r"(.+):([^:=]+)=([0-9.eE+]+)(?:@(\d+))?", text.strip())
    if not match:
        raise UserError(f"--base {text!r}: expected {BASE_FORMAT}")
    device = catalogue.device(match.group(1).strip())
    devices, nodes = split_count(match.group(2), "--base")
    try:
        throughput = float(match.group(3))
    except ValueError:
        raise UserError(f"--base {text!r}: {match.group(3)!r} is no throughput; expected {BASE_FORMAT}") from None
    if not math.isfinite(throughput) or throughput <= 0:
        raise UserError(f"--base {text!r}: the throughput must be a number > 0 (samples/s)")
    batch = parsed_batch(match.group(4), text) if match.group(4) else None
    return Base(device.label, device, devices, nodes, throughput, batch, "published", f"--base {text}")


def parsed_batch(value: str, text: str) -> int:
    """The per-device batch of `--base ...@BATCH`, in `BATCH`'s range: a base at batch 0 does no work, so
    every figure projected from it would be 0."""
    try:
        return int(BATCH.parse(value))
    except Refused as error:
        raise UserError(f"--base {text!r}: the per-device batch {value!r} is not valid: expected {error}, "
                        f"as in {BASE_FORMAT}") from None


def reference_base(text: str, workload: ProjectedWorkload, catalogue: Catalogue) -> Base:
    """`--base ref:DEVICE:N`: the suites/references.toml row of the workload's model and precision on N
    devices whose board the words name."""
    _, device_words, count = (text.split(":", 2) + ["", ""])[:3]
    devices, nodes = split_count(count or "1", "--base ref")
    sizes = dict(workload.sizes)
    rows = [row for row in shipped_table("references.toml").get("reference", [])
            if row["model"] == workload.model and row["precision"] == str(workload.precision)
            and row["n_devices"] == devices and dict(row.get("sizes", {})) == {
                k: v for k, v in sizes.items() if k in row.get("sizes", {})}]
    row = best_match(device_words, tuple({**row, "match": row["match"]} for row in rows)) if device_words else None
    row = row or next((r for r in rows if set(r["match"].lower().split()) <= set(device_words.lower().split())), None)
    if row is None:
        known = sorted({f"ref:{r['match']}:{r['n_devices']}" for r in shipped_table("references.toml")["reference"]
                        if r["model"] == workload.model})
        raise UserError(f"--base {text!r}: suites/references.toml has no {workload.model} "
                        f"{workload.precision} row on {devices} devices of {device_words!r}; its rows of this model: "
                        f"{', '.join(known) or 'none'}")
    throughput = float(row["samples_per_s"])
    unit = str(row.get("unit", ""))
    if unit.startswith("tokens"):
        throughput /= float(workload.tokens_per_sample or 1)
    if unit.endswith("/GPU"):
        throughput *= devices
    device = catalogue.find_device(row["match"])
    return Base(str(row["device"]), device, devices, nodes, throughput, None, "published",
                f"suites/references.toml: {row['source']} ({row['url']})")


def record_paths(paths: list[str]) -> list[Path]:
    """Record files under each of `paths`: a results folder (its records), or a .jsonl file."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = ResultsStore(path).files() or sorted([*path.rglob("*.jsonl"), *path.rglob("*.jsonl.gz")])
            files.extend(found)
        else:
            raise UserError(f"--from {path}: no such file or folder; give a results folder or a records .jsonl")
    return files


def matches(record: Record, workload: ProjectedWorkload) -> bool:
    """A record of the same training step: model, sizes, precision, framework, optimizer, uncompiled."""
    case, params = record.case, record.case.param_dict
    sizes = {k: v for k, v in params.items() if k in SIZE_PARAMS}
    return (case.workload == "train_step" and str(record.status) == "ok" and params.get("model") == workload.model
            and case.precision == workload.precision and case.framework == workload.framework
            and str(case.compile) == "none" and sizes == dict(workload.sizes)
            and params.get("optimizer", "sgd") == workload.optimizer and record.metrics.get("samples_per_s"))


def record_base(paths: list[str], workload: ProjectedWorkload, catalogue: Catalogue) -> Base:
    """The best record of the workload under `paths`: one real device (not emulated) first, then the
    workload's own strategy, then the latest."""
    records = [r for r in load_records(record_paths(paths)) if matches(r, workload)]
    if not records:
        raise UserError(f"--from {' '.join(paths)}: no ok record of train_step {workload.label} (optimizer "
                        f"{workload.optimizer}); run it first (`parbench run --suite ... --filter model="
                        f"{workload.model}`) or give --base")
    best = max(records, key=lambda r: (not r.emulated, r.case.n_devices == 1,
                                       r.case.strategy == workload.strategy, r.timestamp))
    base = base_of_record(best, catalogue)
    others = [float(r.metrics["samples_per_s"]) for r in records if r.case.id == best.case.id and r is not best]
    return replace(base, spread=measured_spread(best.measurement.samples if best.measurement else None, others,
                                                base.samples_per_s))


def base_of_record(record: Record, catalogue: Catalogue) -> Base:
    case, params = record.case, record.case.param_dict
    gpus = record.environment.get("gpus") or []
    is_gpu = str(case.device) == "gpu"
    name = str(gpus[0].get("name")) if is_gpu and gpus else str((record.environment.get("cpu") or {}).get(
        "model", case.device))
    batch = int(params["batch"])
    per_device = batch if params.get("scaling", "weak") == "weak" else batch // case.n_devices
    nodes = int(record.details.get("nodes") or 1)
    metrics = record.metrics
    return Base(name, catalogue.find_device(name) if is_gpu else None, case.n_devices, nodes,
                float(metrics["samples_per_s"]), per_device, "measured",
                f"record {case.id} ({record.machine}, run {record.run_id})", bool(record.emulated),
                metrics.get("peak_memory_bytes"), metrics.get("state_bytes_per_device_estimate"), is_gpu)
