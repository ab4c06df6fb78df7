"""The residual CNN (`suites.models.cnn.spec.ResidualCnn`) in torch: NCHW inputs, 'same'
3x3 convolutions with biases, no batch norm."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suites.frameworks.torch.models import StageLayer, TorchModel
from suites.models.cnn.spec import ResidualCnn
from suites.workloads.model_spec import NUM_CLASSES


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        # 3x3, stride 1: 'same' padding is one pixel on every side, as in TensorFlow.
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.conv2(F.relu(self.conv1(x))))


class TorchResidualCnn(TorchModel):
    def __init__(self, spec: ResidualCnn) -> None:
        super().__init__(spec)
        self.stem = nn.Conv2d(3, spec.channels, 3, padding=1)
        self.blocks = spec.blocks
        for b in range(spec.blocks):
            self.add_module(f"block{b}", _ResidualBlock(spec.channels))
        self.head = nn.Linear(spec.channels, NUM_CLASSES)

    @property
    def input_shape(self) -> tuple[int, ...]:
        h, w, c = self.spec.input_shape
        return (c, h, w)

    def input_from_canonical(self, batch: np.ndarray) -> np.ndarray:
        return batch.transpose(0, 3, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        for b in range(self.blocks):
            x = getattr(self, f"block{b}")(x)
        return self.head(x.mean(dim=(2, 3)))

    def stage_layers(self) -> list["StageLayer"]:
        """The stem, each residual block, and the pooled head."""
        return [StageLayer(("stem",), lambda modules, x: F.relu(modules["stem"](x))),
                *(StageLayer((f"block{b}",), lambda modules, x, name=f"block{b}": modules[name](x))
                  for b in range(self.blocks)),
                StageLayer(("head",), lambda modules, x: modules["head"](x.mean(dim=(2, 3))))]
