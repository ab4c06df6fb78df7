"""Which forward (or sequence of layers) TF builds for each model spec. The catalogue sits above
the model folders' implementations (`suites.models.<model>.tf_model`), which build on
`suites.frameworks.tf.models`' helpers; it imports the one a spec names when asked."""
from __future__ import annotations

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.cases.vocabulary import Framework  # noqa: E402
from suites.frameworks.model_folders import model_implementation  # noqa: E402
from suites.frameworks.tf.models import Forward, Layer, keras_forward, sequential  # noqa: E402
from suites.measure.unsupported import Unsupported  # noqa: E402
from suites.workloads.model_spec import ModelSpec  # noqa: E402
from suites.workloads.user_model import UserModel  # noqa: E402

#: The packages whose modules this one imports by the path a spec names (for `Workload.version`).
LOADS_BY_PATH = ("suites.models",)


def built_in(spec: ModelSpec) -> list[Layer] | Forward:
    """A built-in model as its spec's TF implementation builds it (`ModelSpec.implementations`):
    its layers, or one forward where it is no sequence of layers. The model folders
    (`suites.models`) build on this module, so it imports them by import path when asked,
    never when it loads. Raises Unsupported for a model with no TF implementation."""
    if isinstance(spec, UserModel) or Framework.TF not in type(spec).implementations:
        raise Unsupported(f"TF training implements the built-in models with a TF implementation and user "
                          f"models with a tf builder; {getattr(spec, 'model_name', spec.name)!r} has neither")
    return model_implementation(type(spec), Framework.TF)(spec)


def build_forward(spec: ModelSpec, compute_dtype: tf.DType = tf.float32) -> Forward:
    """The spec's forward. A user model's Keras layers fix their compute dtype when they are
    built, so its forward takes `compute_dtype` only; a built-in forward takes any: its layers
    in turn, or the one forward its implementation builds (`built_in`)."""
    if isinstance(spec, UserModel):
        return keras_forward(spec, compute_dtype)
    built = built_in(spec)
    return sequential(built) if isinstance(built, list) else built


def layer_forwards(spec: ModelSpec) -> list[Layer]:
    """The spec's layers in order, one per `suites.strategies.stages.layer_names(spec)` (their
    composition is `build_forward(spec)`), as its TF implementation builds them (BERT and
    GPT-2: the transformer's); raises Unsupported for a model with no such sequence here (a
    user's Keras model, a model built as one forward)."""
    built = None if isinstance(spec, UserModel) else built_in(spec)
    if not isinstance(built, list):
        raise Unsupported(f"TF builds {getattr(spec, 'model_name', spec.name)!r} as "
                          f"{'a user' + chr(39) + 's Keras model' if built is None else 'one forward'}, "
                          "not as layers that model and pipeline parallelism can split")
    return built
