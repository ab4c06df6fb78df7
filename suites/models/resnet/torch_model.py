"""ResNet-50 v1.5 in PyTorch, from the neutral `ResNet50` spec's canonical weights.

Every convolution is bias-free and followed by `nn.BatchNorm2d` (epsilon 1e-5, no running
statistics: see `suites.models.resnet.spec`), padding k // 2 on every side. Under "sync" batch
norm the runnable swaps the batch norms for synchronised ones once the process group exists
(`suites.frameworks.torch.batchnorm`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from suites.frameworks.torch.models import TorchModel
from suites.models.resnet.spec import BATCH_NORM_EPSILON, ResNet50


class ConvBn(nn.Module):
    """A bias-free convolution and its batch norm, as ``<prefix>.conv`` / ``<prefix>.bn``."""

    def __init__(self, kernel: int, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False)
        self.bn = batch_norm(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


def batch_norm(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BATCH_NORM_EPSILON, track_running_stats=False)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (the block's stride: v1.5), 1x1 expand, each with batch norm; the
    shortcut is the input or, in a stage's first block, a strided 1x1 convolution with batch
    norm; ReLU after the sum."""

    def __init__(self, cin: int, mid: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), batch_norm(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, padding=1, bias=False), batch_norm(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), batch_norm(cout)
        self.down = ConvBn(1, cin, cout, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class Stage(nn.Module):
    """A stage's bottlenecks, ``block0``, ``block1``, ..., applied in turn. A module that is
    called (not a container), so a wrapper's hooks on it run (FSDP makes each stage a unit)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.children():
            x = block(x)
        return x


class TorchResNet50(TorchModel):
    """stem (7x7/2 conv, batch norm, ReLU, 3x3/2 max pool), stages ``stage1``-``stage4`` of
    ``block{b}`` bottlenecks, global average pool, ``head``. NCHW inputs."""

    def __init__(self, spec: ResNet50) -> None:
        super().__init__(spec)
        self.stem = ConvBn(7, 3, spec.width, stride=2)
        convs = {conv.name: conv for conv in spec.convolutions()}
        self.stage_names = []
        for stage, blocks in enumerate(spec.stage_blocks, start=1):
            layers = Stage()
            for block in range(blocks):
                first, expand = convs[f"stage{stage}.block{block}.1"], convs[f"stage{stage}.block{block}.3"]
                stride = convs[f"stage{stage}.block{block}.2"].stride
                layers.add_module(f"block{block}", Bottleneck(first.cin, first.cout, expand.cout, stride))
            self.add_module(f"stage{stage}", layers)
            self.stage_names.append(f"stage{stage}")
        self.head = nn.Linear(spec.final_channels(), spec.classes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        h, w, c = self.spec.input_shape
        return (c, h, w)

    def input_from_canonical(self, batch):  # type: ignore[no-untyped-def]
        return batch.transpose(0, 3, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, padding=1)
        for name in self.stage_names:
            x = getattr(self, name)(x)
        return self.head(x.mean(dim=(2, 3)))
