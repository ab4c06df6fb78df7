"""The multilayer perceptron (`suites.models.mlp.spec.Mlp`) in torch: dense layers and ReLUs."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from suites.frameworks.torch.models import StageLayer, TorchModel
from suites.models.mlp.spec import Mlp
from suites.workloads.model_spec import NUM_CLASSES


class TorchMlp(TorchModel):
    def __init__(self, spec: Mlp) -> None:
        super().__init__(spec)
        widths = [spec.features] + [spec.hidden] * spec.depth + [NUM_CLASSES]
        for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
            self.add_module(f"dense{i}", nn.Linear(fan_in, fan_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The registered children, in order: no attribute lookups by name, and DataParallel's
        # replicas (which copy `_modules`, not plain attributes) use their own layers.
        *hidden, last = self.children()
        for layer in hidden:
            x = F.relu(layer(x))
        return last(x)

    def stage_layers(self) -> list["StageLayer"]:
        """Each dense layer, its ReLU with it (the last layer's logits have none)."""
        *hidden, last = (name for name, _ in self.named_children())
        return [*(StageLayer((name,), lambda modules, x, name=name: F.relu(modules[name](x)))
                  for name in hidden),
                StageLayer((last,), lambda modules, x: modules[last](x))]
