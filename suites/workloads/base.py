"""Framework-neutral workload definitions.

A workload says *what* is computed: its parameters, its analytic FLOP count, how many samples
a step processes. Each framework supplies one small subclass of
`Runnable` that says *how*; it is named here by import path and imported only when a case of
that framework runs, so neutral code never imports torch or TensorFlow.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping

from suites.cases.case import Case, ParamValue
from suites.cases.vocabulary import Framework, Precision


@dataclass(frozen=True)
class TrainingState:
    """A training case's counts that its strategy turns into bytes per device."""

    parameters: int
    #: Optimizer states per parameter (SGD 0, Adam 2).
    optimizer_states: int
    #: Activations the whole model keeps for one device's batch of a data-parallel split, in
    #: the compute dtype; None where the model does not count them.
    activation_bytes: int | None


@dataclass(frozen=True)
class Param:
    """One parameter of a workload, with what a grid file may set it to."""

    name: str
    type: type = int
    default: ParamValue | None = None  # None: the grid must give it
    choices: tuple[ParamValue, ...] | None = None
    minimum: int | None = 1  # for ints: sizes must be positive
    help: str = ""

    def problem(self, value: object) -> str | None:
        """Why `value` is not allowed, or None."""
        if self.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            return f"must be an integer, got {value!r}"
        if self.type is str and not isinstance(value, str):
            return f"must be a string, got {value!r}"
        if self.type is bool and not isinstance(value, bool):
            return f"must be true or false, got {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of {', '.join(map(str, self.choices))}"
        if self.type is int and self.minimum is not None and value < self.minimum:  # type: ignore[operator]
            return f"must be >= {self.minimum}, got {value}"
        return None


def _defaults(params: Iterable[Param]) -> dict[str, ParamValue]:
    return {p.name: p.default for p in params if p.default is not None}


#: The kinds of workload: what a strategy's `Rules.kinds` chooses among.
WORKLOAD_KINDS = ("kernel", "training", "collective")


class Workload(ABC):
    """What a case computes. Subclasses declare the class attributes and `flops_per_step`."""

    name: ClassVar[str]
    kind: ClassVar[str]  # one of WORKLOAD_KINDS
    params: ClassVar[tuple[Param, ...]]
    #: The precisions a case of it may ask for: a case in another is unavailable, with the reason
    #: (`suites.strategies.jobs.Job.unavailable_reason`).
    precisions: ClassVar[frozenset[Precision]] = frozenset(Precision)
    #: framework -> "module:Class" of its Runnable, imported lazily: a user's workload names
    #: its own; the built-in ones' are the framework layer's (`suites.frameworks.implementations`).
    implementations: ClassVar[Mapping[Framework, str]] = {}
    #: The parameters a CPU rehearsal of a GPU case sets (`suites.runner.rehearsal`): small values
    #: of the workload's own parameters, which take the case's code path in seconds on a CPU. A
    #: kernel or collective declares its own (tests/test_rehearsal_sizes.py checks that it does);
    #: without them its rehearsal runs at the GPU case's sizes. A training step's come from its model
    #: (`suites.workloads.model_spec.ModelSpec.rehearsal_sizes`).
    rehearsal_params: ClassVar[Mapping[str, ParamValue]] = {}
    #: The version of what a case of it computes, part of each record's work fingerprint
    #: (`suites.records.work_fingerprint`): raise it where the same case would compute other work
    #: (a default size, an optimizer's options, a loss), so that records of before and after never
    #: pair as equal work. Records older than the field ran version 1.
    definition_version: ClassVar[int] = 1

    def __init__(self, case: Case) -> None:
        self.case = case
        #: The workload's own parameters: the case's, defaults for the rest. A strategy's or a
        #: compiler's options are the job's (`suites.strategies.jobs.Job`), not here.
        own = {param.name for param in self.params}
        self.p: dict[str, ParamValue] = {**self.defaults(),
                                         **{name: value for name, value in case.param_dict.items() if name in own}}

    # --- declared by subclasses -------------------------------------------------------
    @abstractmethod
    def flops_per_step(self) -> float:
        """Analytic floating-point operations of one timed step, over all devices."""

    def samples_per_step(self) -> int | None:
        """Samples one step processes (all devices together), or None if not meaningful."""
        return None

    def tokens_per_step(self) -> int | None:
        """Tokens one step processes (all devices together), for sequence models; else None."""
        return None

    def bytes_per_step(self) -> int | None:
        """Bytes a collective moves per step, for algbw/busbw; None for compute workloads."""
        return None

    @property
    def runs_user_code(self) -> bool:
        """Whether a step calls code from outside parbench (a workload a plugin registered, or
        a user's model), which may hang, exit, crash or fork: such a case never runs in the
        parbench process, so that its deadline can stop it and nothing it does ends the run."""
        return not type(self).__module__.startswith("suites.")

    def min_bytes_per_step(self) -> int | None:
        """Kernels: the fewest bytes one step must move between the device and its memory — each
        input read once, the output written once, in the case's dtype — the denominator of its
        arithmetic intensity (roofline). None for workloads without one."""
        return None

    def training_state(self) -> "TrainingState | None":
        """What the training state a device holds is computed from (the strategy divides it:
        `Job.state_estimate`); None for workloads that train nothing."""
        return None

    def batch_statistics_reason(self, groups: int | None, sync_reason: str | None) -> str | None:
        """Why the case cannot compute its model's batch statistics the way the model asks,
        given into how many `groups` the strategy splits a step's batch (None: it does not say)
        and why it cannot synchronise them (`sync_reason`); None for workloads without any."""
        return None

    def statistics_groups(self, replica_groups: int | None) -> int:
        """Into how many equal parts of the global batch a step computes batch statistics,
        given the strategy's `replica_groups`: 1 for workloads without batch statistics."""
        return 1

    def check_params(self, parts: int) -> dict[str, ParamValue]:
        """The case's parameters for its numerics check, whose batch is cut into `parts`
        (devices, micro-batches): the case's own where the check runs the case as it is."""
        return self.case.param_dict

    def unavailable_reason(self) -> str | None:
        """Why this workload cannot run as `self.case` asks, independent of the hardware."""
        return None

    def split_problem(self, parts: int, what: str) -> str | None:
        """Why one step's work cannot be split evenly into `parts` (named `what`, e.g.
        "ranks"), or None. Data-parallel strategies ask before they shard a batch."""
        return None

    @classmethod
    def shape_problems(cls, params: Mapping[str, ParamValue]) -> list[str]:
        """Problems that involve several parameters together (e.g. a kernel bigger than the image)."""
        return []

    # --- shared behaviour ---------------------------------------------------------------
    @classmethod
    def defaults(cls) -> dict[str, ParamValue]:
        return _defaults(cls.params)

    @classmethod
    def param(cls, name: str) -> Param | None:
        return next((p for p in cls.params if p.name == name), None)
