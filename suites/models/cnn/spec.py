"""The residual CNN (`cnn`), framework-neutral: its parameters and FLOPs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from suites.cases.vocabulary import Framework
from suites.workloads.model_spec import NUM_CLASSES, ConvLayout, ModelSpec, size

#: Bytes of an fp32 element (the input images).
FP32_BYTES = 4


@dataclass(frozen=True)
class ResidualCnn(ConvLayout, ModelSpec):
    """stem conv3x3(3->c)+relu; `blocks` x [conv3x3+relu, conv3x3, +skip, relu];
    global average pool; dense(c->10). 'same' padding, stride 1, no batch norm (so that
    data-parallel results equal the full-batch result exactly, without cross-replica BN)."""

    name: ClassVar[str] = "cnn"
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "torch_model:TorchResidualCnn",
        Framework.TF: "tf_model:cnn_layers",
    }
    #: Empty: its defaults (32 channels, 2 blocks, 32x32 images) are a CPU's size already, and a
    #: rehearsal keeps the case's own.
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {}
    image: int = 32
    channels: int = size(32, "channels of the stem and every residual block")
    blocks: int = size(2, "residual blocks")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.image, self.image, 3)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.channels
        shapes: dict[str, tuple[int, ...]] = {"stem.kernel": (3, 3, 3, c), "stem.bias": (c,)}
        for b in range(self.blocks):
            for j in (1, 2):
                shapes[f"block{b}.conv{j}.kernel"] = (3, 3, c, c)
                shapes[f"block{b}.conv{j}.bias"] = (c,)
        shapes["head.kernel"] = (c, NUM_CLASSES)
        shapes["head.bias"] = (NUM_CLASSES,)
        return shapes

    def forward_flops_per_sample(self) -> float:
        pixels = self.image * self.image
        c = self.channels
        stem = 2 * pixels * 9 * 3 * c
        body = self.blocks * 2 * (2 * pixels * 9 * c * c)
        return float(stem + body + 2 * c * NUM_CLASSES)

    def activation_bytes_per_sample(self, compute_bytes: int, autocast: bool) -> float:
        """Bytes one image holds at a torch training step's peak (`suites.predict.memory`): every
        ReLU's output (the stem's and two a block: each the next convolution's saved input), the
        pooled features and logits in the compute dtype, the fp32 image and, in 16 bits, the copy
        of it the stem convolution keeps."""
        pixels = self.image * self.image
        image = 3 * pixels
        copy = image if compute_bytes < FP32_BYTES else 0
        saved = (1 + 2 * self.blocks) * self.channels * pixels + self.channels + NUM_CLASSES
        return float(compute_bytes * (saved + copy) + FP32_BYTES * image)
