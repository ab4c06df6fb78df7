"""Which torch module builds each model spec, and building one. The catalogue sits above the
model folders' implementations (`suites.models.<model>.torch_model`), which build on
`suites.frameworks.torch.models`; it imports the one a spec names when asked."""
from __future__ import annotations

import numpy as np
import torch

from suites.cases.vocabulary import Framework
from suites.frameworks.model_folders import model_implementation
from suites.frameworks.torch.models import TorchModel, TorchUserModel
from suites.workloads.model_spec import ModelSpec
from suites.workloads.user_model import UserModel

#: The packages whose modules this one imports by the path a spec names (for `Workload.version`).
LOADS_BY_PATH = ("suites.models",)


def module_class(spec: ModelSpec) -> type[TorchModel]:
    """The torch module of `spec`: a user model's `TorchUserModel`, a built-in model's the class
    its spec names (`ModelSpec.implementations`; BERT and GPT-2 inherit the transformer's). The
    model folders (`suites.models`) build on this module, so it imports them by import path when
    asked, never when it loads."""
    if isinstance(spec, UserModel):
        return TorchUserModel
    return model_implementation(type(spec), Framework.TORCH)


def build(spec: ModelSpec, weights: dict[str, np.ndarray], device: torch.device,
          dtype: torch.dtype = torch.float32) -> TorchModel:
    """The spec's model on `device`, in `dtype`, holding `weights` (canonical layout), its conv
    kernels in the model's `memory_format`."""
    model = module_class(spec)(spec)
    model.load_canonical(weights)
    return model.to(device=device, dtype=dtype, memory_format=model.memory_format)
