"""`torch.compile` for inductor cases: what is compiled, how compiles are counted and forgotten.

While an inductor case runs, inductor's caches are off (`force_disable_caches`), so every
compile is a cold one: the check's compile does not warm the first timed step's through the
FX-graph or autotuning caches, and `compile_s` is what a first run on a fresh machine pays.
Dynamo's recompile limit raises instead of silently falling back to eager
(`fail_on_recompile_limit_hit`): a case that keeps recompiling fails, never times eager steps
as compiled ones.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

import torch

from suites.cases.vocabulary import Compile
from suites.frameworks.torch.modes import CUDA_GRAPHS_MODE

Compiled = TypeVar("Compiled", bound=Callable[..., Any])

if TYPE_CHECKING:
    from suites.strategies.jobs import Job


def compiled(job: "Job", fn: Compiled) -> Compiled:
    """`fn` (a function or module) under `torch.compile` in the case's mode; unchanged unless
    the case's `compile` is inductor. Under reduce-overhead (CUDA graphs) each call begins a
    new step (`cudagraph_mark_step_begin`): a graph replay may then reuse the memory of the
    previous step's outputs, which the training loop no longer holds."""
    if job.compiler.compile is not Compile.INDUCTOR:
        return fn
    mode = job.compiler.options.compile_mode
    graph = torch.compile(fn, mode=None if mode == "default" else mode)
    if mode != CUDA_GRAPHS_MODE:
        return graph  # type: ignore[return-value]

    def replayed(*args: Any, **kwargs: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return graph(*args, **kwargs)
    return replayed  # type: ignore[return-value]


def replays_graphs(job: "Job") -> bool:
    """Whether the case's compiled function replays as CUDA graphs (inductor, reduce-overhead)."""
    return job.compiler.compile is Compile.INDUCTOR and job.compiler.options.compile_mode == CUDA_GRAPHS_MODE


def static_inputs(tensors: Iterable[torch.Tensor]) -> None:
    """Mark each tensor's address as fixed for `torch.compile` (`torch._dynamo.mark_static_address`,
    unguarded). CUDA graphs read their inputs from the addresses they were recorded with, so a
    replay first copies every input that is not static into a buffer of the graph's own; a
    static input is read where it is, with no copy. Unguarded, a static input at another address
    compiles nothing anew: the graph is recorded once more for it (its own graph, which later
    calls with that input replay), and such re-recordings are not counted against
    `cudagraph_unexpected_rerecord_limit` (torch._inductor.cudagraph_trees)."""
    for tensor in tensors:
        torch._dynamo.mark_static_address(tensor, guard=False)


def compilations() -> int:
    """Graphs dynamo has compiled in this process so far (its counter only grows)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def forget() -> None:
    """Drop every compiled graph: the next call of a compiled function compiles anew."""
    torch._dynamo.reset()


class ColdCompiles:
    """Turns inductor's caches off and dynamo's recompile limit into an error, for one case;
    `restore` puts both back."""

    def __init__(self) -> None:
        import torch._dynamo.config as dynamo_config

        self._saved = (torch.compiler.config.force_disable_caches, dynamo_config.fail_on_recompile_limit_hit)
        torch.compiler.config.force_disable_caches = True
        dynamo_config.fail_on_recompile_limit_hit = True
        # What it says is what this class is for: no line of every run's output.
        warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")

    def restore(self) -> None:
        import torch._dynamo.config as dynamo_config

        torch.compiler.config.force_disable_caches, dynamo_config.fail_on_recompile_limit_hit = self._saved
