"""Training-step workloads, framework-neutral: the built-in models' registry, optimizers, `TrainStep`.

The models are `ModelSpec`s (`suites.workloads.model_spec`), each in its folder of
`suites.models` with its torch and TF implementations; `BUILTIN_SPECS` lists them, and user
models join `MODELS` through `register_model`.

The built-in specs' sizes are `train_step` parameters (`SIZE_PARAMS`: fields declared with
`size`); a case that sets some gets its model through `sized_model`, defaults elsewhere.

One step = forward + backward + optimizer update: plain SGD or Adam (`OPTIMIZERS`), with the
same hyperparameters in both frameworks, so the update is the same function everywhere. Loss:
the spec's `loss` (softmax cross-entropy for the built-in models; user models may choose squared
error), mean over the global batch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

import numpy as np

from suites.cases.case import ParamValue
from suites.models.cnn.spec import ResidualCnn
from suites.models.llama.spec import LlamaBlock
from suites.models.mlp.spec import Mlp
from suites.models.resnet.spec import ResNet50
from suites.models.transformer.spec import BertBase, Gpt2Small, TransformerBlock
from suites.workloads.base import Param, TrainingState, Workload
from suites.workloads.collectives import DTYPE_BYTES
from suites.workloads.model_spec import SIZE_CHOICES, SIZE_HELP, ModelSpec

#: Adam's hyperparameters: torch.optim.Adam's defaults (no weight decay, no AMSGrad).
ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8


@dataclass(frozen=True)
class OptimizerSpec:
    """An optimizer of `train_step`, applied the same way by both frameworks."""

    name: str
    learning_rate: float
    #: Optimizer states kept per parameter, fp32 (Adam: the first and second moments).
    states_per_parameter: int
    #: SGD's momentum (0: plain SGD).
    momentum: float = 0.0
    #: L2 weight decay added to the gradient (SGD's), or decoupled decay (AdamW's).
    weight_decay: float = 0.0


#: The optimizers a case may name. Adam's first steps move every parameter by about the learning
#: rate, so a layer's output by about lr x fan-in: at SGD's 0.01 the default models' loss goes
#: from ~3 to ~30 in two steps, and at torch's default 1e-3 so does that of models 1024 wide or
#: more (a 2048-wide mlp: 3 -> 18). On such a diverging trajectory bf16's rounding alone moves the
#: loss by 3-30%, and the loss-trajectory check cannot tell a bug from it. At 1e-4 the loss stays
#: in range from the default sizes to a 4096-wide mlp and a 4-layer, 256-wide transformer, with
#: bf16 within 3e-3 of fp32 (a tenth of its tolerance).
OPTIMIZERS: dict[str, OptimizerSpec] = {
    "sgd": OptimizerSpec("sgd", learning_rate=0.01, states_per_parameter=0),
    "adam": OptimizerSpec("adam", learning_rate=1e-4, states_per_parameter=2),
    # The published recipes' optimizers: ResNet-50's SGD with momentum 0.9 and weight decay 1e-4
    # (He et al. 2015; torchvision's reference recipe), the transformers' AdamW with decoupled
    # weight decay 0.1 (GPT-2 as nanoGPT/llm.c train it). The learning rates are the checks' (the
    # timed work does not depend on them).
    "momentum": OptimizerSpec("momentum", learning_rate=0.01, states_per_parameter=1, momentum=0.9,
                              weight_decay=1e-4),
    "adamw": OptimizerSpec("adamw", learning_rate=1e-4, states_per_parameter=2, weight_decay=0.1),
}
#: Samples per device in the numerics check's batch (`suites.strategies.jobs.Job.check_job`): two, so that a
#: replica's local batch statistics are over more than one sample.
CHECK_SAMPLES_PER_DEVICE = 2


#: The built-in model specs, in the order their size parameters are listed: one line per model
#: folder of `suites.models`.
BUILTIN_SPECS: tuple[type[ModelSpec], ...] = (Mlp, ResidualCnn, TransformerBlock, BertBase, Gpt2Small, LlamaBlock,
                                              ResNet50)
#: Model name -> a zero-argument factory of its spec; user models join through `register_model`.
MODELS: dict[str, Callable[[], ModelSpec]] = {m.name: m for m in BUILTIN_SPECS}


#: `train_step` size parameter -> the built-in specs it sizes (the transformers share their names).
SIZE_PARAMS: dict[str, tuple[type[ModelSpec], ...]] = {}
for _spec in BUILTIN_SPECS:
    for _name in _spec.size_fields():
        SIZE_PARAMS[_name] = (*SIZE_PARAMS.get(_name, ()), _spec)


def default_sizes() -> dict[str, dict[str, int]]:
    """Each registered model's integer size parameters at their defaults: what the report
    compares a run's sizes with (it reads records, not this registry)."""
    return {name: {field_name: declared.default for field_name, declared in type(factory()).size_fields().items()
                   if isinstance(declared.default, int)}
            for name, factory in MODELS.items()}


def register_model(name: str, factory: Callable[[], ModelSpec]) -> None:
    if name in MODELS and MODELS[name] is not factory:
        raise ValueError(f"a model named {name!r} is already registered; choose another name")
    MODELS[name] = factory


def sized_model(name: str, sizes: Mapping[str, ParamValue]) -> ModelSpec:
    """The registered model `name`, with the size parameters `sizes` set (the rest default).
    Raises ValueError, with the one message `size_problems` gives, where a size does not belong
    to the model or the sizes make no model."""
    problems = size_problems(name, sizes)
    if problems:
        raise ValueError("; ".join(problems))
    return _resized(MODELS[name](), sizes)


def _resized(spec: ModelSpec, sizes: Mapping[str, ParamValue]) -> ModelSpec:
    """`spec` with `sizes` set, each converted to its field's type (an int or a string)."""
    own = type(spec).size_fields()
    return replace(spec, **{key: type(own[key].default)(value) for key, value in sizes.items()
                            if key in own}) if sizes else spec


def size_problems(name: str, sizes: Mapping[str, ParamValue]) -> list[str]:
    """Why size parameters `sizes` cannot size the registered model `name` (empty: they can)."""
    spec = MODELS[name]()
    own = type(spec).size_fields()
    foreign = sorted(set(sizes) - set(own))
    if foreign:
        owners = ", ".join(_owned(key) for key in foreign)
        takes = f"its size parameters are {', '.join(own)}" if own else "it takes no size parameters"
        return [f"size parameter{'s' if len(foreign) > 1 else ''} {owners} "
                f"do{'es' if len(foreign) == 1 else ''} not apply to model {name!r}; {takes}"]
    return _resized(spec, sizes).size_problems()


def _owned(key: str) -> str:
    """A size parameter with the built-in models it sizes: 'seq (transformer, bert, ...)'; a name no
    model takes, as given (a typo on the command line: `predict --sizes colour=3`)."""
    owners = SIZE_PARAMS.get(key, ())
    return f"{key} ({', '.join(spec.name for spec in owners)})" if owners else f"{key} (of no model)"


def _size_param(key: str, specs: tuple[type[ModelSpec], ...]) -> Param:
    declared = specs[0].size_fields()[key]
    kind = type(declared.default)
    defaults = {spec.name: spec.size_fields()[key].default for spec in specs}
    shown = ", ".join(f"{name} {value}" for name, value in defaults.items())
    # The default of the model that declared it first; each model's own default applies to it.
    return Param(key, type=kind, default=declared.default, choices=declared.metadata.get(SIZE_CHOICES),
                 minimum=1 if kind is int else None,
                 help=f"{', '.join(defaults)} only: {declared.metadata[SIZE_HELP]} (default: {shown})")


class TrainStep(Workload):
    """One optimizer step of a model. `batch` is per device under weak scaling (the default:
    global batch = batch x n_devices) and global under strong scaling (split across devices)."""

    name = "train_step"
    kind = "training"
    params = (
        Param("model", type=str, minimum=None,
              help=f"a built-in model ({', '.join(MODELS)}) or a registered user model"),
        Param("batch", help="per-device batch (weak scaling) or global batch (strong scaling)"),
        Param("scaling", type=str, default="weak", choices=("weak", "strong"), minimum=None),
        Param("optimizer", type=str, default="sgd", choices=tuple(OPTIMIZERS), minimum=None,
              help=f"sgd (plain, learning rate {OPTIMIZERS['sgd'].learning_rate}), momentum (SGD, momentum "
                   f"{OPTIMIZERS['momentum'].momentum}, weight decay {OPTIMIZERS['momentum'].weight_decay}: "
                   f"ResNet's recipe), adam (learning rate {OPTIMIZERS['adam'].learning_rate}, betas "
                   f"{ADAM_BETAS}, eps {ADAM_EPSILON}) or adamw (adam with decoupled weight decay "
                   f"{OPTIMIZERS['adamw'].weight_decay}: the transformers'; fused on CUDA)"),
        *(_size_param(key, specs) for key, specs in SIZE_PARAMS.items()),
    )
    @classmethod
    def shape_problems(cls, params: Mapping[str, ParamValue]) -> list[str]:
        if params.get("model") not in MODELS:
            return [f"model {params.get('model')!r} is not one of {', '.join(MODELS)} "
                    f"(user models must be registered before the grid is read)"]
        return size_problems(str(params["model"]), cls._sizes(params))

    @staticmethod
    def _sizes(params: Mapping[str, ParamValue]) -> dict[str, ParamValue]:
        return {key: value for key, value in params.items() if key in SIZE_PARAMS}

    def unavailable_reason(self) -> str | None:
        problems = self.shape_problems(self.case.param_dict)  # a case made outside a grid
        if problems:
            return problems[0]
        builders = getattr(self.model, "builders", None)
        if builders is not None and self.case.framework not in builders:
            return f"user model {self.p['model']!r} has no {self.case.framework} builder"
        return self.model.framework_problem(self.case.framework)

    def batch_statistics_reason(self, groups: int | None, sync_reason: str | None) -> str | None:
        """Why the case's strategy cannot compute the model's batch statistics the way the
        model asks (a strategy that does not say how it splits the batch; "sync" where the
        strategy has no synchronised batch norm), or None."""
        mode = self.model.batch_statistics
        if mode is None:
            return None
        if groups is None:
            return (f"model {self.p['model']!r} has batch norm, and strategy {self.case.strategy!s} "
                    "does not say over which samples a step computes batch statistics")
        return sync_reason if mode == "sync" else None

    def statistics_groups(self, replica_groups: int | None) -> int:
        """Into how many equal parts of the global batch the step computes batch statistics,
        each part on its own: the strategy's `replica_groups` (replicas or micro-batches) for a
        model whose batch norm is "local", 1 for "sync" and for a model without batch norm. The
        numerics check's float64 reference computes them over the same parts."""
        if self.model.batch_statistics != "local":
            return 1
        return replica_groups or 1

    def statistics_detail(self, groups: int) -> str:
        """How the check's reference computed batch statistics over `groups` parts, for its
        detail ("" for a model without batch norm)."""
        mode = self.model.batch_statistics
        if mode is None:
            return ""
        if groups == 1:
            return f"; batchnorm {mode}: reference batch statistics over the global batch of {self.global_batch}"
        return (f"; batchnorm {mode}: reference batch statistics per shard, {groups} shards of "
                f"{self.global_batch // groups}, as the replicas compute them")

    @property
    def model(self) -> ModelSpec:
        """The case's model: sized by the size parameters the case sets, the rest defaults."""
        return sized_model(str(self.p["model"]), self._sizes(self.case.param_dict))

    @property
    def runs_user_code(self) -> bool:
        """A model of the user's (`suites.user_model`) is user code, as a plugin workload is."""
        return super().runs_user_code or self.model.runs_user_code

    @property
    def optimizer(self) -> str:
        return str(self.p["optimizer"])

    @property
    def global_batch(self) -> int:
        batch = int(self.p["batch"])
        return batch * self.case.n_devices if self.p["scaling"] == "weak" else batch

    def check_params(self, parts: int) -> dict[str, ParamValue]:
        """The case's parameters at the numerics check's global batch: `CHECK_SAMPLES_PER_DEVICE`
        per device, rounded up to a multiple of the `parts` the step cuts its batch into
        (devices, micro-batches), never more than the case's own. The check runs the case's own
        step (strategy, devices, precision) on it, so its time and memory do not grow with the
        global batch, and its float64 reference costs a few samples per device."""
        wanted = CHECK_SAMPLES_PER_DEVICE * self.case.n_devices
        check_batch = min(self.global_batch, -(-wanted // parts) * parts)
        batch = check_batch if self.p["scaling"] == "strong" else check_batch // self.case.n_devices
        return {**self.case.param_dict, "batch": batch}

    def split_problem(self, parts: int, what: str) -> str | None:
        if self.global_batch % parts:
            return f"the global batch of {self.global_batch} does not split evenly over {parts} {what}"
        return None

    @property
    def per_device_batch(self) -> int:
        return self.global_batch // self.case.n_devices

    def flops_per_step(self) -> float:
        """Training step ~ 3x forward (backward costs about twice the forward)."""
        return 3.0 * self.model.forward_flops_per_sample() * self.global_batch

    def samples_per_step(self) -> int:
        return self.global_batch

    def tokens_per_step(self) -> int | None:
        tokens = self.model.tokens_per_sample
        return None if tokens is None else tokens * self.global_batch

    def training_state(self) -> TrainingState | None:
        """The model's parameter count, the optimizer's states per parameter and the
        activations the whole model keeps for one device's batch; None where the parameter
        count is not known here (a user model's parameters are known to its framework only)."""
        spec = self.model
        parameters = sum(int(np.prod(shape)) for shape in spec.parameter_shapes().values())
        if not parameters:
            return None
        per_sample = spec.saved_activations_per_sample()
        activations = (None if per_sample is None
                       else per_sample * self.per_device_batch * DTYPE_BYTES[self.case.precision])
        return TrainingState(parameters, OPTIMIZERS[self.optimizer].states_per_parameter, activations)
