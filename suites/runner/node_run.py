"""The life of a `parbench run --nnodes` run on one node: join the node group, agree on the
cases, then follow node 0's steps (any other node) or lead the run (node 0), and end it on every
node whether the run finished or stopped (`suites.runner.nodes` has each of those steps).

A front end says where the node group meets (`NodeRun`) and hands over what node 0 does with
the group: run its suite with the group as its `Runner`'s nodes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from suites.cases.case import Case
from suites.cases.timing_config import TimingConfig
from suites.runner import nodes
from suites.runner.plan import Plan
from suites.runner.runner import Runner
from suites.runner.termination import Terminated
from suites.strategies.jobs import Job


@dataclass(frozen=True)
class NodeRun:
    """Where this node's group meets and its place in it (`--nnodes`, `--node-rank`,
    `--rdzv-endpoint`, `--rdzv-timeout`)."""

    nnodes: int
    node_rank: int
    endpoint: str
    timeout_s: float


#: What node 0 does with its group (None: the run is this machine's alone): the exit status.
Lead = Callable[[nodes.NodeSpan | None], int]


def run_on_nodes(where: NodeRun | None, cases: list[Case], plans: list[Plan], timing: TimingConfig,
                 lead: Lead) -> int:
    """`lead(None)` where the run is this machine's alone; else join the group, agree on `cases`
    and `timing`, and follow (a node other than 0) or `lead` with the group (node 0). A node that
    stops (an error, Ctrl-C, a signal) tells the others why, so they stop at their next wait with
    one line naming it; node 0 tells the others when the suite is done."""
    if where is None:
        return lead(None)
    span = nodes.start(where.endpoint, where.nnodes, where.node_rank, where.timeout_s)
    nodes.agree_on_cases(span, cases, timing)
    try:
        if not span.group.is_first:
            return nodes.follow(span, wait_s=longest_run_s(plans, timing) + where.timeout_s)
        code = lead(span)
    except BaseException as error:
        nodes.finish(span, error=why_stopped(error))
        raise
    nodes.finish(span)
    return code


def why_stopped(error: BaseException) -> str:
    """What the other nodes are told of a node that stopped with `error`: one line."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(error, Terminated):
        return f"stopped by {error}"
    return str(error).splitlines()[0] if str(error).strip() else type(error).__name__


def longest_run_s(plans: list[Plan], timing: TimingConfig) -> float:
    """The longest node 0 can take over the suite: every case at its deadline, each retry too
    (how long a follower waits for the next step)."""
    runner = Runner(timing, nodes=None)
    deadlines = sum(runner.deadline_s(planned if isinstance(planned, Job) else None) for planned in plans)
    return deadlines * (1 + max(0, int(timing.contention_retries)))
