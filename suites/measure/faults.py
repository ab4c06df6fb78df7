"""Injected faults: a testing hook that breaks a training case the way a strategy bug would, so
tests can show that the numerics check fails it.

The fault is named by one environment variable, `FAULT_ENV`, declared in `suites.knobs` (rank
processes inherit it from the launcher). Unset, every function below is the identity. The training
runnables call them where the fault acts: on the model a step builds (`step_model`), on the
gradients the check reads (`observed_gradients`), on a pipeline micro-batch's loss
(`microbatch_loss_weight`), on the weights an asynchronous update says it read
(`claimed_weights`) and on whether this rank's gradients are its own shard's alone
(`skips_all_reduce`). A failed check's detail names the injected fault (`detail`).
"""
from __future__ import annotations

from dataclasses import fields, replace
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from suites import knobs

if TYPE_CHECKING:
    from suites.workloads.training import ModelSpec

FAULT_ENV = "PARBENCH_INJECT_FAULT"


class Fault(str, Enum):
    #: The last rank's gradients are its own shard's alone, not the average over the ranks.
    NOT_ALL_REDUCED = "not_all_reduced"
    #: The gradients are divided by the world size twice (a mean of means).
    SCALED_TWICE = "scaled_twice"
    #: The largest parameter's gathered gradient has its two halves (shards) swapped.
    WRONG_SHARD = "wrong_shard"
    #: The last micro-batch of each step contributes nothing to the gradient.
    DROPPED_MICROBATCH = "dropped_microbatch"
    #: Every asynchronous update says it read the initial weights, whichever it read.
    STALE_UPDATE = "stale_update"
    #: The step's batch norm computes the other kind of statistics than the case asks:
    #: synchronised where they should be local, and local where they should be synchronised.
    FLIPPED_BATCHNORM = "flipped_batchnorm"


def injected() -> Fault | None:
    """The fault `FAULT_ENV` names, or None. An unknown name is an error, not a silent pass: the
    knob's parser (suites.knobs) refuses it in one line naming the faults."""
    name = knobs.read(FAULT_ENV) or ""
    return Fault(name) if name else None


def detail() -> str:
    """What a check's detail says of the injected fault ("" without one)."""
    fault = injected()
    return f"; fault injected: {fault.value}" if fault else ""


def step_model(spec: "ModelSpec") -> "ModelSpec":
    """The model the step builds: `spec`, with its batch-norm mode flipped under
    FLIPPED_BATCHNORM (the check's reference keeps the case's)."""
    if injected() is not Fault.FLIPPED_BATCHNORM or "batchnorm" not in {f.name for f in fields(spec)}:
        return spec
    return replace(spec, batchnorm="sync" if getattr(spec, "batchnorm") == "local" else "local")


def skips_all_reduce(rank: int, world_size: int) -> bool:
    """Whether this rank's checked gradients are its own shard's, not all-reduced
    (NOT_ALL_REDUCED: the last rank of several)."""
    return injected() is Fault.NOT_ALL_REDUCED and world_size > 1 and rank == world_size - 1


def observed_gradients(gradients: dict[str, np.ndarray], world_size: int) -> dict[str, np.ndarray]:
    """The gradients the check compares: those the step produced, changed by SCALED_TWICE or
    WRONG_SHARD."""
    fault = injected()
    if fault is Fault.SCALED_TWICE:
        return {name: gradient / world_size for name, gradient in gradients.items()}
    if fault is Fault.WRONG_SHARD:
        largest = max(gradients, key=lambda name: gradients[name].size)
        flat = gradients[largest].reshape(-1)
        swapped = np.roll(flat, flat.size // 2).reshape(gradients[largest].shape)
        return {**gradients, largest: swapped}
    return gradients


def microbatch_loss_weight(index: int, microbatches: int) -> float:
    """The weight of micro-batch `index` (0-based, of `microbatches`) in a pipeline step's loss:
    1, or 0 for the last one under DROPPED_MICROBATCH."""
    dropped = injected() is Fault.DROPPED_MICROBATCH and index == microbatches - 1
    return 0.0 if dropped else 1.0


def claimed_weights(read: dict[str, np.ndarray], initial: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights an asynchronous update says it read: those it read, or under STALE_UPDATE
    the initial ones."""
    return initial if injected() is Fault.STALE_UPDATE else read
