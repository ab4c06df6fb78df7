"""The record: one line of the results store (`suites.records.store`), one JSON object per case per run.

Its schema is `Record` below, every field documented where it is declared, and the dataclasses it
holds, each documented the same way: `Case`, `Measurement`, `Check`, `Contention`, `BoundBy`, and the
provenance's shape, `suites.records.environment_schema.Environment`. `SCHEMA_VERSION` says what a
version promises; `READS` lists the versions `Record.from_dict` reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from suites.cases.case import Case
from suites.cases.vocabulary import Status
from suites.records.bound_by import BoundBy
from suites.records.check import Check
from suites.records.contention import Contention
from suites.records.environment_schema import Environment
from suites.records.measurement import Measurement

#: The version of the schema this code writes, in every record's `schema`.
#: 3: the figures of torch training cases no longer hold the harness's memory: the numerics
#: check's float32 copy of the initial weights is freed before the timed steps (a 4096-wide mlp's
#: 196 MiB per rank had read as training memory: FSDP's per-rank memory 0.76x DDP's), so a CPU
#: case's peak and training state fall by that much from version 2's; and every record stores the
#: work it did (`work`, `suites.records.work_fingerprint`). Energy readings record their counter's
#: update period and their board's power limit, and flag a short window or a power over the limit
#: (`suites.records.energy_readings`). Every field is written, as in version 2.
#: 2: every field this version declares is written, the record's and its parts' (null where it
#: does not apply). A field absent from a version-2 record is a bug: `Record.from_dict` refuses a
#: line that lacks one of the record's own fields (the parts' from_dict read an absent field as
#: its default, as they must for version 1).
#: 1: records written before version 2: a field absent from one was not recorded (the code that
#: wrote it predates the field), which a reader takes as unknown, never as none. Both versions
#: have the same fields; version 2 only promises that none is left out.
SCHEMA_VERSION = 3
#: The versions `Record.from_dict` reads; any other (0, 4, "2", none at all) is refused.
READS = (1, 2, 3)
#: The fields a record of each version writes beyond version 1's (`Record.from_dict` requires them).
ADDED_IN = {"work": 3}


@dataclass(frozen=True)
class Record:
    """One case's result in one run: what ran, how it went, every sample, and where it ran.
    `to_dict` writes it as one JSON object whose keys are these fields' names."""

    #: What ran: {id, workload, framework, device, n_devices, strategy, precision, params,
    #: compile} (`Case.to_dict`). compile: none | xla | inductor; absent in version-1 records
    #: older than the compile axis, which ran uncompiled.
    case: Case
    #: "ok" | "unavailable" | "failed".
    status: Status
    #: The id shared by every record of one `parbench run`.
    run_id: str
    #: When the case finished: ISO 8601, UTC.
    timestamp: str
    #: The suite's name (or the grid file's stem).
    suite: str
    #: Provenance: machine label, hostname, CPU, memory, GPUs (nvidia-smi) and their links, CUDA
    #: libraries, what each framework discovered in the run's process, Python, OS, libraries, git
    #: commit and dirty flag, the frameworks' threads. Every key's shape and meaning: `Environment`.
    environment: Environment
    #: Why not ok ("" when ok).
    reason: str = ""
    #: True when several devices were emulated (logical CPUs, gloo ranks on one host).
    emulated: bool = False
    #: Every sample, and the statistics stored beside them (`Measurement.to_dict`: median_s,
    #: iqr_s, n, noisy, straggler, compile_s, burst_gain, bimodal, ...); None where nothing was
    #: timed (an unavailable case, one that failed before its samples).
    measurement: Measurement | None = None
    #: {name: value} for each derived metric that applies to the case; the names, units and
    #: formulas are `suites.records.metric_registry.METRICS` (None: applies, but unknown), and
    #: the flags among them (true/false) `suites.records.metric_registry.FLAGS`.
    metrics: dict[str, float | None] = field(default_factory=dict)
    #: The numerics check, did the case compute the right thing (`Check`); None where no check
    #: ran. Metric not_checked: the check did not run (and never passed), its value what it
    #: would have needed, its tolerance the limit that is over, its detail why.
    check: Check | None = None
    #: Free-form extras of the workload, strategy, launcher and recorder. Keys a reader may meet:
    #:   energy_per_device      [{device, method, joules_per_step, watts, samples_per_joule,
    #:                          samples_per_kwh}] where energy was read
    #:                          (`suites.records.energy_readings.EnergyMeasurement.per_device`)
    #:   memory_explained       what the peak is made of, and why a category is off its estimate
    #:                          (`suites.records.memory_breakdown.MemoryExplanation.note`)
    #:   memory_breakdown       why a training case has no breakdown: compiled, or its tracker failed
    #:   memory_not_measured    why a TensorFlow case's peak memory is unknown
    #:   above_peak             which peak the figure is above
    #:                          (`suites.records.metric_registry.above_peak_note`)
    #:   traceback_tail, failed_at      a failed case: its traceback's last lines, when (time.time)
    #:   rank, output_tail      a failed multi-process case: the rank blamed, its output's last lines
    #:   predicted_first_step_s a case stopped for a first step predicted over its limit
    #:   launcher, nodes, node, nodes_share_a_host  how the ranks were started and on which nodes
    #:   cpus_pinned            the cores the case's (rank 0's) process was pinned to
    #:   machines               every process's provenance (multi-process training; rank 0 stores it)
    #:   cudnn_autotune, memory_format, mixed_precision, batchnorm, device_placement, split
    #:                          how the framework ran the case
    details: dict[str, Any] = field(default_factory=dict)
    #: Whether other work competed for the case's cores while it was timed, with the measured
    #: shares and the verdict (`Contention`); None where the case did not run here (unavailable),
    #: and in version-1 records older than the field.
    contention: Contention | None = None
    #: What limits the figure, {verdict, reason, evidence {figure: value}} (`BoundBy`): ok
    #: records only, None elsewhere (and in version-1 records older than the field).
    bound_by: BoundBy | None = None
    #: The work the case did (`suites.records.work_fingerprint.Work.to_dict`: {version, fingerprint,
    #: parts {workload, model, optimizer, layout, batch, sequence, shape, precision}}), resolved when
    #: it ran; records pair as equal work where their fingerprints are equal. None where the case
    #: resolved to no workload; absent from records before version 3, whose work `work_of` infers.
    work: dict[str, Any] | None = None
    #: The schema version the record was written under: SCHEMA_VERSION for a record made by this
    #: code; a record read keeps its own, so a reader tells a field a version-1 record did not
    #: record (absent: unknown) from one a version-2 record wrote empty (None: does not apply).
    #: `to_dict` writes it unchanged: a version-1 record written again stays version 1, and so
    #: never claims fields it lacked.
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        _require_readable(self.schema)

    @property
    def machine(self) -> str:
        return str(self.environment.get("machine", "?"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema, "run_id": self.run_id, "timestamp": self.timestamp,
            "suite": self.suite, "case": self.case.to_dict(), "status": str(self.status),
            "reason": self.reason, "emulated": self.emulated,
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "metrics": self.metrics, "check": self.check.to_dict() if self.check else None,
            "details": self.details, "environment": self.environment,
            "contention": self.contention.to_dict() if self.contention else None,
            "bound_by": self.bound_by.to_dict() if self.bound_by else None,
            **({"work": self.work} if self.schema >= ADDED_IN["work"] else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Record":
        """The record `data` holds, of any version in READS (ValueError naming it otherwise). A
        version-2 record must hold every field (ValueError naming those it lacks); a version-1
        record's absent fields read as their defaults, and the record keeps version 1."""
        version = data.get("schema")
        _require_readable(version)
        if version >= 2:
            missing = [name for name in FIELDS if name not in data and version >= ADDED_IN.get(name, 2)]
            if missing:
                raise ValueError(f"schema {version} record lacks {', '.join(missing)} (a version-{version} "
                                 f"record writes every field)")
        return cls(
            case=Case.from_dict(data["case"]), status=Status(data["status"]), run_id=data["run_id"],
            timestamp=data["timestamp"], suite=data.get("suite", ""),
            environment=data.get("environment") or {}, reason=data.get("reason", ""),
            emulated=bool(data.get("emulated", False)),
            measurement=Measurement.from_dict(data["measurement"]) if data.get("measurement") else None,
            metrics=data.get("metrics") or {},
            check=Check.from_dict(data["check"]) if data.get("check") else None,
            details=data.get("details") or {},
            contention=Contention.from_dict(data["contention"]) if data.get("contention") else None,
            bound_by=BoundBy.from_dict(data["bound_by"]) if data.get("bound_by") else None,
            work=data.get("work"), schema=version,
        )


#: The fields of a record, in declaration order: the keys `Record.to_dict` writes.
FIELDS = tuple(f.name for f in fields(Record))


def _require_readable(version: Any) -> None:
    """ValueError where `version` is not one of READS (a bool or a float is no version)."""
    if type(version) is not int or version not in READS:
        raise ValueError(f"schema {version!r} is not one this parbench reads "
                         f"(versions {', '.join(map(str, READS))})")
