"""The tidy table's columns that decide what stands beside what (issue 46, like for like): the
hardware a record ran on, the work it did, and whether its energy reading may enter a ratio. One
group, apart from the other columns; rows of sources that store none of it (asv, pytest-benchmark)
leave them empty, and the report then falls back to the machine label and the case's own work.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from suites.records.energy_readings import power_limits
from suites.records.record import Record

LIKE_COLUMNS: dict[str, str] = {
    "hardware_id": "the hardware a record ran on, as recorded: its GPUs' UUIDs where nvidia-smi gave them, else "
                   "hostname, CPU model and cores, RAM and every GPU's name, memory, power limit and MIG mode, with "
                   "the frameworks' threads (a label for another thread count is another configuration); records of "
                   "one hardware are one machine whatever their labels (suites.report.analyses."
                   "machines); '' where the source records none",
    "work_source": "what the record says of its work, as JSON: the work it stored (`Record.work`) and the details "
                   "an older record's work is inferred from (memory_format, mixed_precision); '' for other sources",
    "energy_flags": "why the energy reading may enter no ratio: short_window (read over too few updates of its "
                    "counter), over_limit (average power above the board's power limit: the meter is wrong); "
                    "comma-separated, '' where none holds or nothing was read",
    "energy_window_s": "the shortest window one of the row's energy readings spans, seconds",
    "energy_power_limit_w": "the board power limit the reading is checked against, W (NVML's, recorded with the "
                            "reading; older records: nvidia-smi's in the environment)",
}
LIKE_FLOATS = ["energy_window_s", "energy_power_limit_w"]
#: Details an older record's work is inferred from (`suites.records.work_fingerprint.infer_parts`).
WORK_DETAILS = ("memory_format", "mixed_precision")


def hardware_id(environment: Mapping[str, Any]) -> str:
    """The record's hardware identity (see `LIKE_COLUMNS`)."""
    gpus = [gpu for gpu in environment.get("gpus") or () if isinstance(gpu, Mapping)]
    uuids = sorted(str(gpu["uuid"]) for gpu in gpus if gpu.get("uuid"))
    if uuids:
        return "gpu " + json.dumps({"uuids": uuids, "threads": environment.get("threads")}, sort_keys=True)
    cpu = environment.get("cpu") or {}
    described = {"hostname": environment.get("hostname"), "cpu": cpu.get("model"),
                 "cores": cpu.get("usable_cores") or cpu.get("logical_cores"),
                 "memory_gib": environment.get("memory_gib"), "threads": environment.get("threads"),
                 "gpus": [[gpu.get(key) for key in ("name", "memory", "power_limit_w", "mig_mode")] for gpu in gpus]}
    return "host " + json.dumps(described, sort_keys=True) if environment.get("hostname") else ""


def like_fields(record: Record) -> dict[str, Any]:
    """The row's like-for-like columns from one record."""
    m = record.measurement
    energy = m.energy if m is not None else None
    flags, window, limit = "", None, None
    if energy is not None and energy.measured:
        checked = energy.with_power_limits(power_limits(record.environment))
        flags = ", ".join(checked.flags)
        window = min(device.seconds for device in checked.devices)
        limits = [device.power_limit_w for device in checked.devices if device.power_limit_w is not None]
        limit = min(limits) if limits else None
    details = {key: record.details[key] for key in WORK_DETAILS if key in record.details}
    return {"hardware_id": hardware_id(record.environment),
            "work_source": json.dumps({"work": record.work, "details": details}, sort_keys=True, default=str),
            "energy_flags": flags, "energy_window_s": window, "energy_power_limit_w": limit}
