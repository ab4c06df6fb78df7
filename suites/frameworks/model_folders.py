"""Where a built-in model's implementation in a framework lives: the module of its model folder
(`suites.models.<model>`) that its spec's `implementations` names. The frameworks' catalogues
(`suites.frameworks.torch.catalog`, `suites.frameworks.tf.catalog`) ask here."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from suites.cases.vocabulary import Framework

if TYPE_CHECKING:
    from suites.workloads.model_spec import ModelSpec


def model_implementation(spec: type["ModelSpec"], framework: Framework) -> Any:
    """What `spec.implementations[framework]` names, imported now from the spec's model folder:
    the folder of the class that declares the table (BERT's and GPT-2's is the transformer's).
    KeyError where the model has no implementation in `framework`."""
    declaring = next(kind for kind in spec.__mro__ if "implementations" in vars(kind))
    module_name, _, attribute = declaring.implementations[framework].partition(":")
    folder = declaring.__module__.rpartition(".")[0]
    return getattr(importlib.import_module(f"{folder}.{module_name}"), attribute)
