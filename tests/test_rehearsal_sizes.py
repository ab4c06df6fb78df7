"""A CPU rehearsal's small sizes are what each workload and model declares, not a list kept in
`suites.runner.rehearsal`: a kernel or collective declares its `rehearsal_params`, a model with
size parameters its `rehearsal_sizes`. One that declares none (its rehearsal would run at the GPU
case's full size on the CPU), or names a parameter it does not have, fails here."""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import ClassVar, Mapping

import pytest

from suites.cases.case import Case
from suites.cases.vocabulary import DeviceKind, Precision
from suites.models.mlp.spec import Mlp
from suites.models.transformer.spec import TransformerBlock
from suites.runner import rehearsal
from suites.runner.rehearsal import rehearsal_of
from suites.workloads import WORKLOADS, Param, Workload
from suites.workloads.model_spec import ModelSpec, size
from suites.workloads.training import MODELS, size_problems

#: The kinds whose rehearsal sizes are the workload's own (a training step's are its model's).
SIZED_KINDS = ("kernel", "collective")
SIZED_WORKLOADS = sorted(name for name, workload in WORKLOADS.items() if workload.kind in SIZED_KINDS)
SIZED_MODELS = sorted(name for name, factory in MODELS.items() if factory().size_fields())


def _declares(cls: type, attribute: str, base: type) -> bool:
    """Whether `cls`, or a class it derives from below `base`, sets `attribute` itself (an empty
    mapping counts: it says the defaults are small already)."""
    return any(attribute in vars(klass) for klass in cls.__mro__ if klass not in base.__mro__)


def workload_problems(workload: type[Workload]) -> list[str]:
    """Why `workload`'s rehearsal parameters are missing or name no parameter of it (empty: fine)."""
    if not _declares(workload, "rehearsal_params", Workload):
        return [f"{workload.kind} workload {workload.name!r} declares no `rehearsal_params`: its GPU cases "
                f"would be rehearsed on the CPU at their full size"]
    problems = []
    for key, value in workload.rehearsal_params.items():
        param = workload.param(key)
        if param is None:
            problems.append(f"{workload.name}.rehearsal_params: {key!r} is not one of its parameters "
                            f"({', '.join(p.name for p in workload.params)})")
        elif (problem := param.problem(value)) is not None:
            problems.append(f"{workload.name}.rehearsal_params: {key} {problem}")
    return problems


def model_problems(name: str) -> list[str]:
    """Why the registered model `name`'s rehearsal sizes are missing or make no model of it."""
    spec = type(MODELS[name]())
    if not _declares(spec, "rehearsal_sizes", ModelSpec):
        return [f"model {name!r} ({spec.__name__}) declares no `rehearsal_sizes`: its GPU cases would be "
                f"rehearsed on the CPU at their full size"]
    own = spec.size_fields()
    foreign = [key for key in spec.rehearsal_sizes if key not in own]
    if foreign:
        return [f"{name}.rehearsal_sizes: {key!r} is not one of its size parameters ({', '.join(own)})"
                for key in foreign]
    return [f"{name}.rehearsal_sizes: {problem}" for problem in size_problems(name, spec.rehearsal_sizes)]


def test_the_built_in_kernels_collectives_and_models_are_all_checked():
    assert {"matmul", "conv2d", "allreduce"} <= set(SIZED_WORKLOADS)
    assert {"resnet50", "bert_base", "gpt2_small", "transformer", "llama_block", "mlp", "cnn"} <= set(SIZED_MODELS)


@pytest.mark.parametrize("name", SIZED_WORKLOADS)
def test_every_kernel_and_collective_declares_its_rehearsal_params(name):
    problems = workload_problems(WORKLOADS[name])
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("name", SIZED_MODELS)
def test_every_model_with_size_parameters_declares_its_rehearsal_sizes(name):
    problems = model_problems(name)
    assert not problems, "; ".join(problems)


class _Scratch(Workload):
    """A kernel registered by a test alone."""

    name = "rehearsal_scratch"
    kind = "kernel"
    params = (Param("size"), Param("repeat", default=3))
    rehearsal_params = {"size": 8}

    def flops_per_step(self) -> float:
        return 0.0


def test_a_workload_that_declares_none_or_misspells_a_parameter_fails():
    class Undeclared(Workload):
        name, kind, params = "undeclared", "kernel", (Param("size"),)

        def flops_per_step(self) -> float:
            return 0.0

    class Misspelt(_Scratch):
        rehearsal_params = {"sise": 8, "repeat": 0}

    assert "declares no `rehearsal_params`" in " ".join(workload_problems(Undeclared))
    problems = workload_problems(Misspelt)
    assert len(problems) == 2 and "'sise' is not one of its parameters (size, repeat)" in problems[0]
    assert "repeat must be >= 1" in problems[1]
    assert workload_problems(_Scratch) == []


@dataclass(frozen=True)
class _Undeclared(ModelSpec):
    name: ClassVar[str] = "rehearsal_undeclared"
    width: int = size(4096, "width")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.width,)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"dense.kernel": (self.width, 10)}

    def forward_flops_per_sample(self) -> float:
        return 20.0 * self.width


@dataclass(frozen=True)
class _Misspelt(Mlp):
    name: ClassVar[str] = "rehearsal_misspelt"
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {"hiden": 32}


@dataclass(frozen=True)
class _NoModel(TransformerBlock):
    name: ClassVar[str] = "rehearsal_no_model"
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {"d_model": 128, "heads": 3}


def test_a_model_that_declares_none_misspells_a_size_or_makes_no_model_fails(monkeypatch):
    for spec in (_Undeclared, _Misspelt, _NoModel):
        monkeypatch.setitem(MODELS, spec.name, spec)  # undone after the test
    assert "declares no `rehearsal_sizes`" in " ".join(model_problems(_Undeclared.name))
    (problem,) = model_problems(_Misspelt.name)
    assert "'hiden' is not one of its size parameters (hidden, depth)" in problem
    assert model_problems(_NoModel.name) == ["rehearsal_no_model.rehearsal_sizes: heads = 3 does not divide "
                                             "d_model = 128"]


def test_a_registered_workloads_rehearsal_sets_its_own_params(monkeypatch):
    monkeypatch.setitem(WORKLOADS, _Scratch.name, _Scratch)  # undone after the test
    case = Case.make(_Scratch.name, "torch", "gpu", "single", "tf32", 1, {"size": 1 << 20, "repeat": 5})
    rehearsed = rehearsal_of(case).case
    assert rehearsed.device is DeviceKind.CPU and rehearsed.precision is Precision.FP32
    assert rehearsed.param_dict == {"size": 8, "repeat": 5}


def test_a_registered_models_rehearsal_sets_its_own_sizes(monkeypatch):
    @dataclass(frozen=True)
    class NarrowMlp(Mlp):
        name: ClassVar[str] = "rehearsal_narrow_mlp"
        rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {"hidden": 32, "depth": 1}

    monkeypatch.setitem(MODELS, NarrowMlp.name, NarrowMlp)
    case = Case.make("train_step", "torch", "gpu", "ddp", "bf16", 2,
                     {"model": NarrowMlp.name, "batch": 64, "hidden": 4096, "depth": 4})
    params = rehearsal_of(case).case.param_dict
    assert params == {"model": NarrowMlp.name, "batch": 2, "hidden": 32, "depth": 1}


def test_the_rehearsal_names_no_workload_or_model():
    """Its sizes are the workloads' and models' own: no name of one appears in its code."""
    names = set(WORKLOADS) | set(MODELS)
    tree = ast.parse(inspect.getsource(rehearsal))
    named = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in names}
    assert named == set()
