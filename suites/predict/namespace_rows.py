"""The namespace study's validation rows (namespace_gloo.toml, docs/studies-namespace-link.md): two ranks in
two network namespaces of this machine, gloo over a rate-limited veth, predicted from the one-rank record of
the same run and the link measured in it.

What the rows' records add (read where the files are; the row says so where they are not):
- threads: each rank's compute is the base's step scaled by the base's torch threads over a rank's (the
  study pins OMP_NUM_THREADS=1 in both, so the factor is 1; the ranks then share the 2 cores with their
  gloo threads and the kernel's veth copies, which the row says);
- the base's measured spread: its quartiles (IQR) and the same case's throughput in the study's other runs
  (run-to-run) bound the compute side of the band;
- contention: whether either record was contended (every one of the study's was), said beside the error;
- the exchange measured: a ddp record's `exchange_share` (its step less the slowest rank's no_sync step),
  beside the exchange the model exposes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from suites.predict.alpha_beta import Topology
from suites.predict.base import measured_spread
from suites.predict.exchange import exchange_seconds
from suites.predict.workload import resolve_workload
from suites.records.record import Record
from suites.records.store import load_records

#: Where the rows' record paths are relative to: the repository holding the package.
REPO = Path(__file__).resolve().parents[2]
SECTION = "this machine, 2 namespaces, gloo"


def record_of(reference: str) -> Record | None:
    """The record a row names as FILE#CASE_ID (FILE relative to the repository), or None."""
    path, _, case_id = reference.partition("#")
    file = REPO / path
    if not file.is_file():
        return None
    return next((r for r in load_records([file]) if r.case.id == case_id), None)


def torch_threads(record: Record | None) -> int | None:
    threads = (record.environment.get("threads") or {}).get("torch") if record else None
    return int(threads) if threads else None


def contention_of(record: Record | None) -> str | None:
    contention = record.contention if record else None
    return contention.why if contention is not None and contention.contended else None


def namespace_row(row: dict[str, Any], same_case_throughputs: list[float], host_margin: float) -> dict[str, Any]:
    """One row scored: compute from the one-rank record (scaled by threads), the exchange over the measured
    link (each rank a node of its own, gloo), the band from the base's spread and the exchange's."""
    workload = resolve_workload(row["model"], dict(row.get("sizes", {})), row["precision"], row["strategy"],
                                row["framework"], row.get("optimizer"))
    devices, nodes = int(row["target_devices"]), int(row["target_nodes"])
    batch = int(row["per_device_batch"])
    link_gbs, latency = float(row["link_gbit_per_s"]) / 8, float(row["link_latency_s"])
    links = Topology(max(1, devices // nodes), nodes, link_gbs if nodes == 1 else 1e6, link_gbs, latency, latency,
                     0.0, latency, latency, 0.0, 1.0, 1.0, backend="gloo")
    base, target = record_of(row.get("base_record", "")), record_of(row.get("measured_record", ""))
    base_threads, rank_threads = torch_threads(base), torch_threads(target)
    factor = base_threads / rank_threads if base_threads and rank_threads else 1.0
    notes = [f"threads: base {base_threads or '?'}, each rank {rank_threads or '?'}: compute x{factor:g}"
             + ("; the 2 ranks share the 2 cores with their gloo threads and the veth's kernel copies"
                if factor == 1.0 else "")]
    base_step = batch * int(row.get("base_devices", 1)) / float(row["base_samples_per_s"])
    compute = base_step * factor
    exchange = exchange_seconds(workload.plugin.exchange, workload, batch, compute, links, links)
    if row.get("gradient_bytes") and int(row["gradient_bytes"]) != workload.parameters * 4:
        notes.append(f"the record's gradients ({row['gradient_bytes']} B) differ from the spec's "
                     f"{workload.parameters * 4} B")
    spread = measured_spread(base.measurement.samples if base and base.measurement else None,
                             [t for t in same_case_throughputs if t != float(row["base_samples_per_s"])],
                             float(row["base_samples_per_s"]))
    samples = batch * devices
    point = samples / (compute + exchange.point)
    low = samples / (compute / spread.low + exchange.worst) * (1 - host_margin)
    high = samples / (compute / spread.high + exchange.best)
    measured = float(row["measured_samples_per_s"])
    contended = [f"{what}: {why}" for what, why in (("base", contention_of(base)), ("target", contention_of(target)))
                 if why]
    share = target.metrics.get("exchange_share") if target else None
    if share:
        notes.append(f"exchange measured {1000 * share * samples / measured:.0f} ms (exchange_share), "
                     f"predicted {1000 * exchange.point:.0f} ms exposed")
    notes.append(f"band: base {spread.how}")
    return {**row, "measured": measured, "predicted": point, "band_low": low, "band_high": high,
            "error": point / measured - 1, "inside": low * (1 - 1e-9) <= measured <= high * (1 + 1e-9),
            "policy": "namespace", "section": SECTION, "base": float(row["base_samples_per_s"]),
            "target": f"{devices} ranks / {nodes} netns, {float(row['link_gbit_per_s']):.2f} Gbit/s",
            "comparable": True, "contended": bool(contended), "contention": "; ".join(contended),
            "exchange_exposed_s": exchange.point, "exchange_measured_s": share * samples / measured if share else None,
            "compute_s": compute, "note": "; ".join(notes)}


def namespace_rows(rows: list[dict[str, Any]], host_margin: float) -> list[dict[str, Any]]:
    """Every row scored; a base's run-to-run spread is the same base case's throughput over the study's rows."""
    by_case: dict[str, set[float]] = {}
    for row in rows:
        case = row.get("base_record", "").partition("#")[2]
        by_case.setdefault(case, set()).add(float(row["base_samples_per_s"]))
    return [namespace_row(row, sorted(by_case[row.get("base_record", "").partition("#")[2]]), host_margin)
            for row in rows]
