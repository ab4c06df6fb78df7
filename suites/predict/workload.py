"""What is projected: a model at its sizes, in a precision, under a strategy of a framework.

The model is a built-in spec or a registered user model (`suites.workloads.training.MODELS`), with
`llama3_8b` a name for `llama_block` at its default sizes, which are Llama 3 8B's published config
(32 layers, d 4096, 32 heads, 8 KV heads, FFN 14,336, vocabulary 128,256). FLOPs, parameters and the
training state a device holds come from the spec and the strategy plugin through the job
(`suites.strategies.jobs.Job`), as for a measured case.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from suites.cases.case import Case, ParamValue
from suites.cases.vocabulary import DeviceKind, Framework, Precision, Strategy
from suites.errors import UserError
from suites.strategies.base import StrategyPlugin
from suites.strategies.jobs import Job, job_for
from suites.strategies.registry import find_plugin
from suites.workloads.model_spec import ModelSpec
from suites.workloads.training import MODELS, OPTIMIZERS, sized_model

#: Model names `predict` takes besides the registered ones: name -> (model, sizes).
MODEL_ALIASES: dict[str, tuple[str, dict[str, ParamValue]]] = {"llama3_8b": ("llama_block", {})}
#: The optimizer a model trains with in the standard suite (suites/grids/standard.toml) where none is given.
DEFAULT_OPTIMIZER = {"resnet50": "momentum", "bert_base": "adamw", "gpt2_small": "adamw", "llama_block": "adamw"}


@dataclass(frozen=True)
class ProjectedWorkload:
    framework: Framework
    model: str
    sizes: tuple[tuple[str, ParamValue], ...]
    precision: Precision
    strategy: Strategy
    optimizer: str

    @cached_property
    def spec(self) -> ModelSpec:
        return sized_model(self.model, dict(self.sizes))

    @cached_property
    def flops_per_sample(self) -> float:
        """A training step's FLOPs per sample: 3 x the forward's (the workload's own convention)."""
        return 3.0 * self.spec.forward_flops_per_sample()

    @cached_property
    def parameters(self) -> int:
        return sum(int(np.prod(shape)) for shape in self.spec.parameter_shapes().values())

    @cached_property
    def units(self) -> tuple[int, ...]:
        """Parameters of each wrapping unit in model order: the spec's top-level modules, which torch
        `fsdp` wraps one by one (`suites.strategies.torch.fsdp.largest_unit` groups them the same way)."""
        units: dict[str, int] = {}
        for name, shape in self.spec.parameter_shapes().items():
            top = name.split(".", 1)[0]
            units[top] = units.get(top, 0) + int(np.prod(shape))
        return tuple(units.values())

    @property
    def optimizer_states(self) -> int:
        """The optimizer's fp32 states per parameter (SGD 0, momentum 1, Adam 2)."""
        return OPTIMIZERS[self.optimizer].states_per_parameter

    @property
    def tokens_per_sample(self) -> int | None:
        return self.spec.tokens_per_sample

    @cached_property
    def plugin(self) -> StrategyPlugin:
        plugin = find_plugin(self.framework, self.strategy)
        if plugin is None:
            raise UserError(f"{self.framework} has no strategy {self.strategy!s}; pick another --strategy or "
                            "--framework")
        return plugin

    def job(self, n_devices: int, per_device_batch: int) -> Job:
        """The job of this workload on `n_devices` GPUs at `per_device_batch` (weak scaling): what the
        plugin's memory terms read."""
        params = {"model": self.model, "batch": per_device_batch, "optimizer": self.optimizer, **dict(self.sizes)}
        return job_for(Case("train_step", self.framework, DeviceKind.GPU, self.strategy, self.precision,
                            n_devices, tuple(sorted(params.items()))))

    @property
    def label(self) -> str:
        sizes = "".join(f" {k}={v}" for k, v in self.sizes)
        return f"{self.model}{sizes} {self.precision} {self.framework} {self.strategy}"


def resolve_workload(model: str, sizes: dict[str, ParamValue], precision: str, strategy: str,
                     framework: str = "torch", optimizer: str | None = None) -> ProjectedWorkload:
    """The workload the command line names; UserError (with the closest names) for an unknown one."""
    name, alias_sizes = MODEL_ALIASES.get(model, (model, {}))
    if name not in MODELS:
        known = sorted([*MODELS, *MODEL_ALIASES])
        near = difflib.get_close_matches(model, known, n=3, cutoff=0.3)
        raise UserError(f"unknown model {model!r}; closest: {', '.join(near or known)} (a user model must be "
                        "registered through PARBENCH_PLUGINS first)")
    chosen = {**alias_sizes, **sizes}
    try:
        sized_model(name, chosen)
    except ValueError as error:
        raise UserError(f"model {name} at {chosen}: {error}; fix --sizes") from None
    values = {"precision": (precision, Precision), "strategy": (strategy, Strategy),
              "framework": (framework, Framework)}
    parsed = {}
    for what, (value, kind) in values.items():
        try:
            parsed[what] = kind(value)
        except ValueError:
            raise UserError(f"unknown {what} {value!r}; one of {', '.join(map(str, kind))}") from None
    optimizer = optimizer or DEFAULT_OPTIMIZER.get(name, "sgd")
    if optimizer not in OPTIMIZERS:
        raise UserError(f"unknown optimizer {optimizer!r}; one of {', '.join(OPTIMIZERS)}")
    return ProjectedWorkload(parsed["framework"], name, tuple(sorted(chosen.items())), parsed["precision"],
                             parsed["strategy"], optimizer)


def parse_sizes(text: str | None) -> dict[str, ParamValue]:
    """"seq=8192,layers=4" -> {"seq": 8192, "layers": 4} (numbers as ints, the rest strings)."""
    sizes: dict[str, ParamValue] = {}
    for part in filter(None, (text or "").split(",")):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--sizes {text!r}: expected NAME=VALUE[,NAME=VALUE...], e.g. seq=8192")
        sizes[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return sizes
