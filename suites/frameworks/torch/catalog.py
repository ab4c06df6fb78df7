"""Which torch module builds each model spec, and building one: the catalogue above the model
modules (`models`, `llm`, `resnet`), so that they build on `models` without importing each other."""
from __future__ import annotations

import numpy as np
import torch

from suites.frameworks.torch.llm import LLM_MODULES
from suites.frameworks.torch.models import TorchMlp, TorchModel, TorchResidualCnn, TorchTransformerBlock, TorchUserModel
from suites.frameworks.torch.resnet import TorchResNet50
from suites.workloads.model_specs import Mlp, ModelSpec, ResidualCnn, TransformerBlock
from suites.workloads.resnet import ResNet50
from suites.workloads.user_model import UserModel


_MODULES: dict[type[ModelSpec], type[TorchModel]] = {
    Mlp: TorchMlp, ResidualCnn: TorchResidualCnn, TransformerBlock: TorchTransformerBlock,
    UserModel: TorchUserModel}


def module_class(spec: ModelSpec) -> type[TorchModel]:
    """The torch module of `spec`: its class's, or its nearest base class's (BERT and GPT-2 are
    transformers with other choices); the Llama stack's and ResNet-50's live in modules of their
    own, which build on `TorchModel`."""
    modules = {**_MODULES, **LLM_MODULES, ResNet50: TorchResNet50}
    return next(modules[kind] for kind in type(spec).__mro__ if kind in modules)


def build(spec: ModelSpec, weights: dict[str, np.ndarray], device: torch.device,
          dtype: torch.dtype = torch.float32) -> TorchModel:
    """The spec's model on `device`, in `dtype`, holding `weights` (canonical layout), its conv
    kernels in the model's `memory_format`."""
    model = module_class(spec)(spec)
    model.load_canonical(weights)
    return model.to(device=device, dtype=dtype, memory_format=model.memory_format)
