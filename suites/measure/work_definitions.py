"""What this parbench's names mean, for the work fingerprint (`suites.records.work_fingerprint`).

Each workload's definition version, each registered model's sizes at their defaults and each
optimizer's options: what a case resolves to here. The run stores every record's work resolved with
them (`stored_work`); the report reads older records with them (`current`), right for a record of the
same definition version.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from suites.records.work_fingerprint import Definitions, Work, infer_parts
from suites.workloads import WORKLOADS
from suites.workloads.base import Workload
from suites.workloads.training import MODELS, OPTIMIZERS


def current() -> Definitions:
    """This parbench's definitions: its workloads' versions, its models' default sizes (every
    model registered so far, user models included) and its optimizers' options."""
    return Definitions(
        versions={name: workload.definition_version for name, workload in WORKLOADS.items()},
        model_sizes={name: _default_sizes(factory()) for name, factory in MODELS.items()},
        optimizers={name: {"lr": spec.learning_rate, "momentum": spec.momentum, "weight_decay": spec.weight_decay}
                    for name, spec in OPTIMIZERS.items()})


def _default_sizes(spec: Any) -> dict[str, Any]:
    """A model spec's size parameters, at the values the spec holds."""
    return {field.name: getattr(spec, field.name) for field in fields(spec) if field.name in type(spec).size_fields()}


def stored_work(workload: Workload, details: Mapping[str, Any]) -> dict[str, Any]:
    """The work `workload`'s case did (or would have: an unavailable case's), having run with
    `details`, resolved here: what its record stores (`suites.records.record.Record.work`). A torch
    conv net's layout is its resolved spec's, which a case that never ran has no detail of."""
    case = workload.case.to_dict()
    spec = getattr(workload, "model", None) if workload.kind == "training" else None
    if case["framework"] == "torch" and hasattr(spec, "memory_format"):
        details = {**details, "memory_format": spec.memory_format}  # type: ignore[union-attr]
    return Work(infer_parts(case, details, current())).to_dict()
