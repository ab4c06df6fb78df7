"""Bring your own model: a model-building function per framework, a loss and (optionally) data.

In the spirit of the classic TF tutorials that wrap a user's model function to spread it over
towers, parbench takes your builder and runs it through every strategy and precision that
applies. The builder is called with no arguments after the framework's RNG is seeded, so every
rank, tower and reference copy starts from the same weights.

Multi-process strategies run your model in fresh processes; they import the module that
defines it (its file path travels in PARBENCH_PLUGINS), so define and register the model at
module level, and keep a script's own work under ``if __name__ == "__main__":``.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import numbers
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from suites import knobs
from suites.cases.vocabulary import Framework
from suites.errors import UserError
from suites.workloads.model_spec import ModelSpec
from suites.workloads.training import MODELS, register_model

PLUGINS_ENV = "PARBENCH_PLUGINS"
LOSSES = ("mse", "cross_entropy")
#: A user model's name: it is a `model=` parameter inside case ids, so no ',', '=', '/' or spaces.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: Every framework seeds its RNG with this before calling a builder (torch.manual_seed,
#: keras.utils.set_random_seed), so every copy of a model in one framework starts equal.
USER_MODEL_SEED = 0


@dataclass(frozen=True)
class UserModel(ModelSpec):
    name: ClassVar[str] = "user"
    runs_user_code: ClassVar[bool] = True
    model_name: str = "user"
    sample_shape: tuple[int, ...] = ()
    loss: str = "mse"  # type: ignore[assignment]  # a field here, a property on built-in specs
    #: framework -> function building the model (torch: an nn.Module; tf: a Keras 3 model,
    #: e.g. a keras.Sequential, whose trainable variables are its weights).
    builders: dict[Framework, Callable[[], Any]] = field(default_factory=dict)
    data: Callable[[int, int], tuple[np.ndarray, np.ndarray]] | None = None
    flops_per_sample: float = 0.0

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.sample_shape

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Unknown to neutral code: each framework reads them off the built model."""
        return {}

    def init_weights(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Empty: the builder draws its own weights after the framework RNG is seeded."""
        return {}

    def forward_flops_per_sample(self) -> float:
        return self.flops_per_sample

    def build(self, framework: Framework) -> Any:
        """The model the user's builder for `framework` makes (the caller seeded the framework's
        RNG); ValueError naming the builder where it makes none (a builder that forgets `return`
        failed later as "optimizer got an empty parameter list")."""
        builder = self.builders[framework]
        model = builder()
        if model is None:
            name = getattr(builder, "__qualname__", None) or repr(builder)
            raise ValueError(f"the model builder of {self.model_name!r} ({framework}={name}) returned None: "
                             f"return the model it builds")
        return model

    def make_batch(self, batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        if self.data is None:
            return super().make_batch(batch, seed)
        x, y = self.data(batch, seed)
        return np.asarray(x, np.float32), np.asarray(y, np.int64 if self.loss == "cross_entropy" else np.float32)


def user_model(name: str, *, input_shape: tuple[int, ...], loss: str = "mse",
               torch: Callable[[], Any] | None = None, tf: Callable[[], Any] | None = None,
               data: Callable[[int, int], tuple[np.ndarray, np.ndarray]] | None = None,
               flops_per_sample: float = 0.0) -> UserModel:
    """Register a model of your own; use its name as `model` in a train_step case or grid.

    `torch()` returns an nn.Module, `tf()` a Keras 3 model; each is called with no arguments
    after its framework's RNG is seeded with `USER_MODEL_SEED`.
    `data(batch, seed) -> (x, y)` draws a deterministic batch (NumPy); without it inputs are
    standard normal and targets are class labels (cross_entropy) — give `data` for mse.
    `flops_per_sample` (forward pass) enables TFLOP/s and % of peak; 0 leaves them out.
    A bad argument (NaN, infinite or negative `flops_per_sample`, a dimension < 1, a builder
    that is not callable...) is a ValueError naming it, before anything is registered.
    """
    _check_arguments(name, input_shape, torch, tf, data, flops_per_sample)
    if loss not in LOSSES:
        raise ValueError(f"loss {loss!r} is not one of {', '.join(LOSSES)}")
    builders = {framework: builder for framework, builder in
                ((Framework.TORCH, torch), (Framework.TF, tf)) if builder is not None}
    if not builders:
        raise ValueError("give at least one builder: torch=... and/or tf=...")
    if loss == "mse" and data is None:
        raise ValueError("an mse model needs data=(batch, seed) -> (x, y) to define its targets")
    spec = UserModel(model_name=name, sample_shape=tuple(int(d) for d in input_shape), loss=loss,
                     builders=builders, data=data, flops_per_sample=float(flops_per_sample))
    register_model(name, lambda: spec)
    _remember_plugin(builders.values())
    return spec


def _check_arguments(name: Any, input_shape: Any, torch: Any, tf: Any, data: Any, flops_per_sample: Any) -> None:
    """ValueError naming the first argument of `user_model` that makes no model."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"name {name!r} is not a model name: use letters, digits, '_', '.' and '-', starting with "
                         f"a letter or digit")
    try:
        dims = tuple(input_shape)
    except TypeError:
        dims = None
    if not dims or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in dims):
        raise ValueError(f"input_shape {input_shape!r} is not the shape of one sample: give a tuple of whole "
                         f"numbers >= 1, such as (3,) or (32, 32, 3)")
    for argument, function in (("torch", torch), ("tf", tf), ("data", data)):
        if function is not None and not callable(function):
            raise ValueError(f"{argument}={function!r} is not callable: give a function")
    if isinstance(flops_per_sample, bool) or not isinstance(flops_per_sample, numbers.Real) \
            or not math.isfinite(flops_per_sample) or flops_per_sample < 0:
        raise ValueError(f"flops_per_sample={flops_per_sample!r} is not valid: give a finite number >= 0 "
                         f"(forward-pass FLOPs per sample; 0 when unknown)")


def _remember_plugin(functions: Any) -> None:
    """Put the defining file in PARBENCH_PLUGINS so worker processes register the model too."""
    paths = knobs.read(PLUGINS_ENV) or []
    for function in functions:
        source = inspect.getsourcefile(function)
        if source and source not in paths:
            paths.append(source)
    os.environ[PLUGINS_ENV] = os.pathsep.join(paths)


def load_plugins() -> None:
    """Import every file or module named in PARBENCH_PLUGINS (the CLI and worker processes).

    A plugin that cannot be imported, or that registers neither a model nor a workload, is a
    UserError naming it."""
    from suites.workloads import WORKLOADS

    for entry in knobs.read(PLUGINS_ENV) or ():
        registered = (set(MODELS), set(WORKLOADS))
        try:
            loaded = _load_plugin(entry)
        except Exception as error:  # a user's file: any error of it is theirs to fix
            sys.modules.pop(_module_name(Path(entry)), None)
            raise UserError(f"{PLUGINS_ENV}: {entry}: {_import_problem(entry, error)}; fix it, or remove it "
                            f"from {PLUGINS_ENV}") from None
        registers = (set(MODELS), set(WORKLOADS)) != registered if loaded else _registered_from(entry)
        if not registers:
            raise UserError(f"{PLUGINS_ENV}: {entry} registers no model or workload; call suites.user_model(...) "
                            f"(or decorate a Workload with suites.workloads.register) at module level in it, or "
                            f"remove it from {PLUGINS_ENV}")


def _registered_from(entry: str) -> bool:
    """Whether the module `entry` names, imported before (a module such as json, or the script that
    called `user_model`), registered a model or a workload."""
    from suites.workloads import WORKLOADS

    names = _imported_as(entry)
    specs = [factory() for factory in MODELS.values()]
    return any(workload.__module__ in names for workload in WORKLOADS.values()) or any(
        getattr(builder, "__module__", None) in names for spec in specs if isinstance(spec, UserModel)
        for builder in spec.builders.values())


def _imported_as(entry: str) -> set[str]:
    """The names the module `entry` (a module name or a .py file) is imported under."""
    if Path(entry).suffix != ".py":
        return {entry}
    path = Path(entry).resolve()
    return {name for name, module in list(sys.modules.items())
            if getattr(module, "__file__", None) and Path(module.__file__).resolve() == path}


def _module_name(path: Path) -> str:
    return f"parbench_plugin_{path.stem}"


def _load_plugin(entry: str) -> bool:
    """Import `entry` (a .py file or a module name); False when it was already imported."""
    path = Path(entry)
    if path.suffix != ".py":
        if entry in sys.modules:
            return False
        importlib.import_module(entry)
        return True
    if not path.is_file():
        raise FileNotFoundError(f"no such file {path}")
    module_name = _module_name(path)
    if module_name in sys.modules or _already_loaded(path):
        return False
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return True


def _import_problem(entry: str, error: Exception) -> str:
    if isinstance(error, SyntaxError):
        return f"syntax error at line {error.lineno}: {error.msg}"
    if isinstance(error, FileNotFoundError):
        return str(error)
    if isinstance(error, ModuleNotFoundError) and error.name == entry:
        return f"no module named {entry!r} (give a .py file path or an importable module name)"
    return f"importing it raised {type(error).__name__}: {error}"


def _already_loaded(path: Path) -> bool:
    resolved = path.resolve()
    return any(getattr(m, "__file__", None) and Path(m.__file__).resolve() == resolved
               for m in list(sys.modules.values()))
