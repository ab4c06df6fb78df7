"""The outcomes of a case's ranks (or of its nodes) merged into the case's one outcome, the same
way wherever they ran: processes on this machine (`suites.runner.launchers`), a Slurm step
(`suites.runner.slurm`) or a `--nnodes` group (`suites.runner.nodes`).

Where none failed, the case's outcome is the first's (rank 0's, which gathered every rank's
figures in-band). Where some failed, it is the failure its launcher blames (the first in time: its
peers' broken connections follow from it), named "rank R: its reason", or the launcher's words
for one that reported nothing. Each launcher knows how to order its failures and why a member
can be silent; this module knows what the merged outcome looks like."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from suites.cases.vocabulary import Status
from suites.runner.execute import Outcome


@dataclass(frozen=True)
class Members:
    """What the outcomes are the outcomes of: how a message names one ("rank"), the details key
    that keeps the blamed one's number, and the number of the first."""

    noun: str = "rank"
    key: str = "rank"
    first: int = 0


RANKS = Members()
NODES = Members("node", "node_rank")


def outcome_file(folder: Path, rank: int) -> Path:
    """Where the worker of `rank` writes its outcome (`python -m suites.runner.case_process --out`)."""
    return folder / f"rank{rank}.json"


def read_outcomes(folder: Path, count: int) -> list[Outcome | None]:
    """The outcomes ranks 0 .. count-1 wrote into `folder`; None for a rank that wrote none."""
    return [Outcome.from_dict(json.loads(path.read_text())) if (path := outcome_file(folder, rank)).exists()
            else None for rank in range(count)]


def failures(outcomes: list[Outcome | None]) -> list[int]:
    """The members that failed: reported a failure, or nothing at all."""
    return [index for index, outcome in enumerate(outcomes) if outcome is None or outcome.status is Status.FAILED]


def merge(outcomes: list[Outcome | None], blamed: int | None, unreported: Callable[[int], str],
          members: Members = RANKS, blamed_details: Callable[[int], dict[str, Any]] | None = None,
          shared: dict[str, Any] | None = None) -> Outcome:
    """The case's outcome: the first member's where none is `blamed` (with the `shared` details,
    e.g. every node's provenance), else the blamed member's failure: its reason after its name, or
    `unreported(index)` where it reported nothing, with its details (`blamed_details(index)`:
    its output's tail) under its own. A failed numerics check is every rank's (the worst rank's,
    shared): the record keeps it."""
    shared = shared or {}
    if blamed is None:
        primary = outcomes[0]
        assert primary is not None, "a member without an outcome is a failure, so one is blamed"
        primary.details.update(shared)
        return primary
    outcome = outcomes[blamed]
    why = f"{members.noun} {blamed + members.first}: {outcome.reason}" if outcome else unreported(blamed)
    return Outcome(Status.FAILED, why, check=outcome.check if outcome else None, details={
        members.key: blamed + members.first, **(blamed_details(blamed) if blamed_details else {}),
        **(outcome.details if outcome else {}), **shared})
