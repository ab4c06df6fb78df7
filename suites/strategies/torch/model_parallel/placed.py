"""The `model_parallel` layout: the model's layer groups each on its own device (`PlacedLayerGroups`)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from suites.frameworks.torch.models import LayerGroup


class PlacedLayerGroups(nn.Module):
    """Layer groups each on its own device, called in turn with the activation moved from
    device to device (the multi-GPU tutorials' model parallelism); the output comes back to
    `output_device`, where the targets are."""

    def __init__(self, groups: Sequence[LayerGroup], devices: Sequence[torch.device],
                 output_device: torch.device) -> None:
        super().__init__()
        self.groups = nn.ModuleList(group.to(device) for group, device in zip(groups, devices))
        self.devices = tuple(devices)
        self.output_device = output_device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for group, device in zip(self.groups, self.devices):
            x = group(x.to(device))
        return x.to(self.output_device)
