"""Which forward (or sequence of layers) TF builds for each model spec: the catalogue above the
model modules (`models`, `llm`, `resnet`), so that they build on `models` without importing each
other."""
from __future__ import annotations

from typing import Callable

from suites.frameworks.tf import backend  # noqa: F401  (first: TF's environment before TF loads)
import tensorflow as tf  # noqa: E402

from suites.frameworks.tf.llm import LLM_LAYERS
from suites.frameworks.tf.models import (Forward, Layer, cnn_layers, keras_forward, mlp_layers, sequential,
                                         transformer_layers)
from suites.frameworks.tf.resnet import resnet_forward
from suites.run.unsupported import Unsupported
from suites.workloads.model_specs import Mlp, ModelSpec, ResidualCnn, TransformerBlock
from suites.workloads.resnet import ResNet50
from suites.workloads.user_model import UserModel


def whole_forwards() -> dict[type[ModelSpec], Callable[..., Forward]]:
    """The models built as one forward rather than a sequence of layers (so model and pipeline
    parallelism do not split them), in modules of their own that use `models`' helpers."""
    return {ResNet50: resnet_forward}


def build_forward(spec: ModelSpec, compute_dtype: tf.DType = tf.float32) -> Forward:
    """The spec's forward. A user model's Keras layers fix their compute dtype when they are
    built, so its forward takes `compute_dtype` only; a built-in forward takes any: its layers
    (`layer_forwards`) in turn, or its `whole_forwards` entry."""
    if isinstance(spec, UserModel):
        return keras_forward(spec, compute_dtype)
    whole = whole_forwards()
    if type(spec) in whole:
        return whole[type(spec)](spec)
    return sequential(layer_forwards(spec))


#: The built-in models as sequences of layers: what model and pipeline parallelism split.
LAYERS: dict[type[ModelSpec], Callable[..., list[Layer]]] = {
    Mlp: mlp_layers, ResidualCnn: cnn_layers, TransformerBlock: transformer_layers}


def layer_forwards(spec: ModelSpec) -> list[Layer]:
    """The spec's layers in order, one per `suites.strategies.stages.layer_names(spec)` (their
    composition is `build_forward(spec)`), from the spec's own entry or its nearest base class's
    (BERT and GPT-2 are transformers); raises Unsupported for a model with no such sequence here
    (a user's Keras model)."""
    layers = {**LAYERS, **LLM_LAYERS}
    kind = next((kind for kind in type(spec).__mro__ if kind in layers), None)
    if kind is None:
        raise Unsupported(f"TF training implements the built-in models ({', '.join(m.name for m in layers)}) "
                          f"and user models with a tf builder; {getattr(spec, 'model_name', spec.name)!r} "
                          "has no TF layers here")
    return layers[kind](spec)
