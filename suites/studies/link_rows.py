"""The namespace link study's figures from its records: the link (an alpha-beta fit of two gloo
all-reduces) and one validation row of `parbench predict` per 2-node training case, written as TOML.

Pure: records in, rows and text out; `suites.studies.namespace_link` runs the study.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

from suites.cases.vocabulary import Status
from suites.records.record import Record
from suites.workloads import workload_of
from suites.workloads.training import sized_model

#: Strategies whose 2-node record becomes a validation row.
TARGET_STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class Link:
    """What the link carried: bandwidth β (Gbit/s) and per-message latency α (s) of the alpha-beta
    model of a ring all-reduce over n ranks, t(S) = 2(n-1)·α + 2(n-1)/n · S/β."""

    gbit_per_s: float
    latency_s: float

    @classmethod
    def fitted(cls, small: tuple[int, float], large: tuple[int, float], ranks: int) -> "Link":
        """The line through two all-reduces, each (bytes per rank, median seconds)."""
        (small_bytes, small_s), (large_bytes, large_s) = small, large
        if large_bytes <= small_bytes or large_s <= small_s:
            raise ValueError(f"the all-reduce of {large_bytes} B ({large_s:.3g} s) was not slower than the one of "
                             f"{small_bytes} B ({small_s:.3g} s): the link cannot be fitted")
        wire = 2 * (ranks - 1) / ranks  # bytes each rank sends per byte reduced
        bytes_per_s = wire * (large_bytes - small_bytes) / (large_s - small_s)
        latency_s = (small_s - wire * small_bytes / bytes_per_s) / (2 * (ranks - 1))
        return cls(gbit_per_s=bytes_per_s * 8 / 1e9, latency_s=latency_s)


@dataclass(frozen=True)
class Run:
    """One `parbench run` of the study: its link rate, where its records are, how it was started."""

    #: Row ids end in it: "1gbit", "unlimited", "1gbit-r2" (the second round).
    name: str
    #: The records file, as the rows name it (relative to where the study ran).
    records: str
    #: The tc command that limited the link ("" unlimited) and node 0's parbench command.
    tc_command: str
    node_command: str


@dataclass(frozen=True)
class Row:
    """One validation row: a one-rank base record and a 2-node target measured beside it."""

    id: str
    framework: str
    strategy: str
    workload: str
    model: str
    sizes: dict[str, int | str]
    precision: str
    scaling: str
    per_device_batch: int
    base_devices: int
    base_nodes: int
    base_samples_per_s: float
    base_record: str
    target_devices: int
    target_nodes: int
    measured_samples_per_s: float
    measured_record: str
    link_gbit_per_s: float
    link_latency_s: float
    link_source: str
    gradient_bytes: int
    date: str
    command: str
    #: Written as a comment above the row: the records' contention flags.
    contention: str = ""

    def toml(self) -> str:
        fields = {key: value for key, value in asdict(self).items() if key != "contention"}
        comment = f"# contention: {self.contention}\n" if self.contention else ""
        return comment + "[[row]]\n" + "".join(f"{key} = {toml_value(value)}\n" for key, value in fields.items())


def toml_value(value: object) -> str:
    """A TOML value: a JSON string is a valid TOML basic string; a dict is an inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_document(rows: Iterable[Row], header: str) -> str:
    """The rows, after `header` as comment lines."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comments + "".join(f"\n{row.toml()}" for row in rows)


def figure(value: float) -> float:
    """Six significant digits: what a timing carries, without float noise in the file."""
    return float(f"{value:.6g}")


def median_s(record: Record) -> float:
    assert record.measurement is not None  # only OK records are read
    return record.measurement.median


def link_of(records: Iterable[Record]) -> Link:
    """The link from the run's two OK all-reduces (the smallest and the largest buffer)."""
    reduces = sorted(((workload_of(record.case).bytes_per_step(), record) for record in records
                      if record.case.workload == "allreduce" and record.status is Status.OK), key=lambda pair: pair[0])
    if len(reduces) < 2:
        raise ValueError(f"{len(reduces)} all-reduce record(s) measured, 2 are needed to fit the link")
    (small_bytes, small), (large_bytes, large) = reduces[0], reduces[-1]
    return Link.fitted((small_bytes, median_s(small)), (large_bytes, median_s(large)), large.case.n_devices)


def gradient_bytes(record: Record) -> int:
    """Bytes all-reduced per step: the model's parameters, 4 bytes each (fp32 gradients)."""
    params = record.case.param_dict
    sizes = {key: value for key, value in params.items() if key not in ("model", "batch", "scaling")}
    model = sized_model(str(params["model"]), sizes)
    return 4 * sum(math.prod(shape) for shape in model.parameter_shapes().values())


def contention_note(record: Record) -> str:
    flags = record.contention
    if flags is None:
        return "not judged"
    share = "" if flags.others_core_share is None else f", others used {flags.others_core_share:.0%} of its cores"
    return (f"contended ({flags.why})" if flags.contended else "not contended") + share


def rows_of(records: list[Record], run: Run, date: str, command: str) -> tuple[list[Row], list[str]]:
    """The run's validation rows, and one line for each row that could not be made (a case that
    failed, a link that could not be fitted)."""
    ok = [record for record in records if record.status is Status.OK and record.measurement is not None
          and (record.case.workload != "train_step" or record.metrics.get("samples_per_s"))]
    problems = [f"{run.name}: {record.case.id}: {record.status}: {record.reason}"
                for record in records if record not in ok]
    bases = [record for record in ok if record.case.workload == "train_step" and record.case.n_devices == 1]
    targets = [record for record in ok if record.case.workload == "train_step" and record.case.n_devices > 1
               and str(record.case.strategy) in TARGET_STRATEGIES]
    try:
        link = link_of(ok)
    except ValueError as error:
        return [], [*problems, f"{run.name}: {error}"]
    if not bases:
        return [], [*problems, f"{run.name}: no one-rank training record to base the rows on"]
    base = bases[0]
    source = (f"measured: gloo all-reduces of 2 buffer sizes between the namespaces, alpha-beta fit; "
              f"tc: {run.tc_command or 'no qdisc (unlimited)'}; parbench: {run.node_command}")
    rows = [_row(base, target, link, run, source, date, command) for target in targets]
    return rows, problems


def nodes_of(record: Record) -> int:
    """The nodes the case's ranks ran on (a case on one node names none)."""
    return len(record.details.get("nodes") or [None])


def _row(base: Record, target: Record, link: Link, run: Run, source: str, date: str, command: str) -> Row:
    params = target.case.param_dict
    return Row(
        id=f"{target.case.strategy}-{run.name}", framework=str(target.case.framework),
        strategy=str(target.case.strategy), workload=target.case.workload, model=str(params["model"]),
        sizes={key: value for key, value in params.items() if key not in ("model", "batch", "scaling")},
        precision=str(target.case.precision), scaling=str(params.get("scaling", "weak")),
        per_device_batch=int(params["batch"]), base_devices=base.case.n_devices, base_nodes=nodes_of(base),
        base_samples_per_s=figure(base.metrics["samples_per_s"]), base_record=f"{run.records}#{base.case.id}",
        target_devices=target.case.n_devices, target_nodes=nodes_of(target),
        measured_samples_per_s=figure(target.metrics["samples_per_s"]),
        measured_record=f"{run.records}#{target.case.id}", link_gbit_per_s=figure(link.gbit_per_s),
        link_latency_s=figure(link.latency_s), link_source=source, gradient_bytes=gradient_bytes(target),
        date=date, command=command,
        contention=f"base {contention_note(base)}; measured {contention_note(target)}")


def markdown_table(runs: Mapping[str, list[Row]]) -> str:
    """Rate, link, base and 2-node samples/s of ddp and fsdp: one line per run that made rows."""
    lines = ["| run (tbf rate) | link measured | latency α | base samples/s (1 rank) | ddp 2 nodes samples/s "
             "| fsdp 2 nodes samples/s |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, rows in runs.items():
        if not rows:
            continue
        strategies = {row.strategy: row for row in rows}
        first = rows[0]
        cells = [f"{strategies[s].measured_samples_per_s:.1f}" if s in strategies else "—" for s in TARGET_STRATEGIES]
        lines.append(f"| {name} | {first.link_gbit_per_s:.2f} Gbit/s | {first.link_latency_s * 1e6:.0f} µs "
                     f"| {first.base_samples_per_s:.1f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"
