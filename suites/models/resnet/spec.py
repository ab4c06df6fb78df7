"""ResNet-50 v1.5, framework-neutral: the model hardware is compared by.

The standard architecture (He et al. 2015, "v1.5" as in NVIDIA's DeepLearningExamples and
torchvision): a 7x7/2 stem convolution, batch norm, ReLU and a 3x3/2 max pool; four stages of
bottleneck blocks (1x1 reduce, 3x3, 1x1 expand to 4x the stage width, each followed by batch
norm; ReLU after the first two and after the residual sum), the stride of a stage's first block
in its 3x3 convolution (v1 strides the first 1x1) and its shortcut a strided 1x1 convolution
with batch norm; global average pooling and a dense layer to 1000 classes. Convolutions have
no bias (batch norm follows each). Padding is symmetric, k // 2 on every side (what torch
does; TF's "SAME" pads a stride-2 layer asymmetrically, so the TF forward pads explicitly).

The sizes are `train_step` parameters so tests and CPU cases can be small: `image` (224),
`width` (the first stage's width, 64), `resnet_depth` (50: blocks (3, 4, 6, 3); 14, 26, 101 and
152 stack other block counts of the same bottleneck) and `classes` (1000). The defaults are the
real ResNet-50: 25,557,032 parameters and 4.09 G multiply-adds per 224x224 image.

`memory_format` (torch only): channels_last (the default, as the published recipes train it:
cuDNN's NHWC kernels on GPUs, oneDNN's on CPUs) or nchw. TF runs NHWC always.

`batchnorm` says how a data-parallel step computes the batch statistics: "local", each
replica over its own shard of the batch (what DDP and MirroredStrategy do by default), or
"sync", over the global batch with an all-reduce of each layer's statistics (torch
`SyncBatchNorm`, Keras' synchronized batch norm). The numerics check's float64 reference
computes them the same way: per shard for "local" (`TrainStep.statistics_groups`).

Running statistics (the moving mean and variance used at inference) are not kept, in either
framework: a training step's loss, gradients and update do not read them, and both frameworks
then time the same work (torch `track_running_stats=False`; the TF forward is a function of
the trainable weights only). Keeping them costs one momentum update of two vectors per batch
norm layer, and under DDP a broadcast of rank 0's buffers before every forward.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator, Mapping, NamedTuple

import numpy as np

from suites.cases.vocabulary import Framework
from suites.workloads.model_spec import ConvLayout, ModelSpec, size

#: Blocks per stage of the bottleneck ResNets, by depth (3 convolutions per block + stem + head).
STAGE_BLOCKS: dict[int, tuple[int, int, int, int]] = {
    14: (1, 1, 1, 1), 26: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
#: Bottleneck blocks expand to 4x the stage width.
EXPANSION = 4
#: Batch norm's epsilon (torch's default and NVIDIA's; Keras' default is 1e-3).
BATCH_NORM_EPSILON = 1e-5
BATCHNORM_MODES = ("local", "sync")
#: Bytes of an fp32 element (the input images) and of an int64 one (the max pool's saved indices).
FP32_BYTES, INDEX_BYTES = 4, 8


class Conv(NamedTuple):
    """One convolution of the network and its batch norm: parameter prefix, kernel size,
    channels in and out, stride, and the spatial size of its output."""

    name: str
    kernel: int
    cin: int
    cout: int
    stride: int
    out_size: int


def conv_out(size_in: int, kernel: int, stride: int) -> int:
    """Output size of a convolution or pool with symmetric padding kernel // 2."""
    return (size_in + 2 * (kernel // 2) - kernel) // stride + 1


@dataclass(frozen=True)
class ResNet50(ConvLayout, ModelSpec):
    """Parameters: ``stem.conv.kernel``, ``stem.bn.{gamma,beta}``;
    ``stage{s}.block{b}.{conv1,conv2,conv3}.kernel`` and ``.{bn1,bn2,bn3}.{gamma,beta}``, the first
    block of each stage also ``.down.conv.kernel`` and ``.down.bn.{gamma,beta}``; ``head.kernel``,
    ``head.bias``. Stages are numbered 1-4."""

    name: ClassVar[str] = "resnet50"
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "torch_model:TorchResNet50",
        Framework.TF: "tf_model:resnet_forward",
    }
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {"image": 64, "width": 16, "resnet_depth": 14}
    image: int = size(224, "image height and width (224; 32 is the smallest that reaches a 1x1 last stage)")
    width: int = size(64, "width of the first stage (64); stages double it, blocks expand 4x")
    resnet_depth: int = size(50, "bottleneck blocks: 50 = (3, 4, 6, 3); 14, 26, 101, 152 other stacks",
                             choices=tuple(STAGE_BLOCKS))
    classes: int = size(1000, "classes of the dense head")
    batchnorm: str = size("local", "batch statistics under data parallelism: per replica (local) or "
                                   "over the global batch (sync)", choices=BATCHNORM_MODES)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.image, self.image, 3)

    @property
    def num_classes(self) -> int:
        return self.classes

    @property
    def batch_statistics(self) -> str | None:
        return self.batchnorm

    def size_problems(self) -> list[str]:
        if self.image < 32:
            return [f"image = {self.image} is too small: ResNet halves it five times (32 or more)"]
        return []

    @property
    def stage_blocks(self) -> tuple[int, int, int, int]:
        return STAGE_BLOCKS[self.resnet_depth]

    def final_channels(self) -> int:
        return self.width * 8 * EXPANSION

    def convolutions(self) -> Iterator[Conv]:
        """Every convolution in forward order (a block's shortcut after its conv3)."""
        spatial = conv_out(self.image, 7, 2)
        yield Conv("stem", 7, 3, self.width, 2, spatial)
        spatial = conv_out(spatial, 3, 2)  # max pool
        cin = self.width
        for stage, blocks in enumerate(self.stage_blocks, start=1):
            mid = self.width * 2 ** (stage - 1)
            for block in range(blocks):
                stride = 2 if block == 0 and stage > 1 else 1
                prefix = f"stage{stage}.block{block}"
                out = conv_out(spatial, 3, stride)
                yield Conv(f"{prefix}.1", 1, cin, mid, 1, spatial)
                yield Conv(f"{prefix}.2", 3, mid, mid, stride, out)
                yield Conv(f"{prefix}.3", 1, mid, mid * EXPANSION, 1, out)
                if block == 0:
                    yield Conv(f"{prefix}.down", 1, cin, mid * EXPANSION, stride, out)
                cin, spatial = mid * EXPANSION, out

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {}
        for conv in self.convolutions():
            conv_name, bn_name = parameter_prefixes(conv.name)
            shapes[f"{conv_name}.kernel"] = (conv.kernel, conv.kernel, conv.cin, conv.cout)
            shapes[f"{bn_name}.gamma"] = (conv.cout,)
            shapes[f"{bn_name}.beta"] = (conv.cout,)
        shapes["head.kernel"] = (self.final_channels(), self.classes)
        shapes["head.bias"] = (self.classes,)
        return shapes

    def forward_flops_per_sample(self) -> float:
        """2 x multiply-adds of the convolutions and the head (batch norm, ReLU, pools and
        residual sums ignored, as in the published 4.1 G multiply-adds of ResNet-50)."""
        convs = sum(2 * c.out_size ** 2 * c.cout * c.kernel ** 2 * c.cin for c in self.convolutions())
        return float(convs + 2 * self.final_channels() * self.classes)

    def init_weights(self, seed: int = 0) -> dict[str, np.ndarray]:
        """He-normal kernels, zero shifts, unit scales, except the last batch norm of every
        block, whose scale starts at zero ("zero-gamma": Goyal et al. 2017, torchvision's
        `zero_init_residual`), so every block starts as its shortcut.

        Why: with unit scales the 50-layer network at this initialisation is so ill-conditioned
        that a 1e-7 relative change of its weights moves the float64 gradient by 1-2% (measured
        at 64x64, width 16, batch 8; a 26-layer stack moves 3e-6), and fp32 then differs from
        float64 by 1e-2, so the gradient check could not tell a strategy's bug from rounding.
        With zero-gamma fp32 matches float64 to ~1e-6. The work of a step is the same either
        way; at the first step the branches' own gradients are zero, and each block's
        `bn3.gamma` gradient carries its branch (and its batch statistics) into the check."""
        weights = super().init_weights(seed)
        for name in weights:
            if name.endswith(".bn3.gamma"):
                weights[name] = np.zeros_like(weights[name])
        return weights

    def parameter_count(self) -> int:
        return sum(int(np.prod(shape)) for shape in self.parameter_shapes().values())

    def activation_bytes_per_sample(self, compute_bytes: int, autocast: bool) -> float:
        """Bytes one image holds at a torch training step's peak, counted from the layer shapes
        (`suites.predict.memory`): what the backward keeps, in the compute dtype (`compute_bytes`):
        every convolution's output (its batch norm's saved input), every ReLU's output (the next
        convolution's saved input; ReLU is not in place), the max pool's output and its int64
        indices, the pooled features and the logits; and the fp32 input image with, in 16 bits,
        its compute-dtype copy the stem convolution keeps. Batch norm runs in the compute dtype
        under autocast too, so `autocast` changes nothing here; the layout (channels_last or NCHW)
        stores the same tensors, so the count does not depend on it."""
        convs = list(self.convolutions())
        outputs = sum(c.out_size ** 2 * c.cout for c in convs)
        relus = sum(c.out_size ** 2 * c.cout for c in convs if not c.name.endswith(".down"))
        pooled_size = conv_out(convs[0].out_size, 3, 2)
        pool = pooled_size ** 2 * self.width
        image = self.image ** 2 * 3
        saved = outputs + relus + pool + self.final_channels() + self.classes
        copy = image if compute_bytes < FP32_BYTES else 0
        return float(compute_bytes * (saved + copy) + INDEX_BYTES * pool + FP32_BYTES * image)


def parameter_prefixes(conv: str) -> tuple[str, str]:
    """A `Conv` name -> the prefixes of its kernel and its batch norm's scale and shift:
    "stem" -> stem.conv, stem.bn; "stage1.block0.2" -> ...conv2, ...bn2; "...down" -> ...down.conv,
    ...down.bn."""
    path, _, leaf = conv.rpartition(".")
    if leaf.isdigit():
        return f"{path}.conv{leaf}", f"{path}.bn{leaf}"
    return f"{conv}.conv", f"{conv}.bn"
