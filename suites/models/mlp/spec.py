"""The multilayer perceptron (`mlp`), framework-neutral: its parameters, FLOPs and activations."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from suites.cases.vocabulary import Framework
from suites.workloads.model_spec import NUM_CLASSES, ModelSpec, size

#: Bytes of an fp32 element (the input features).
FP32_BYTES = 4


@dataclass(frozen=True)
class Mlp(ModelSpec):
    """dense(features->hidden)+relu, (depth-1) x dense(hidden->hidden)+relu, dense(hidden->10)."""

    name: ClassVar[str] = "mlp"
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "torch_model:TorchMlp",
        Framework.TF: "tf_model:mlp_layers",
    }
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {"hidden": 256}
    features: int = 256
    hidden: int = size(512, "width of every hidden layer")
    depth: int = size(3, "hidden layers")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.features,)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        widths = [self.features] + [self.hidden] * self.depth + [NUM_CLASSES]
        shapes: dict[str, tuple[int, ...]] = {}
        for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
            shapes[f"dense{i}.kernel"] = (fan_in, fan_out)
            shapes[f"dense{i}.bias"] = (fan_out,)
        return shapes

    def forward_flops_per_sample(self) -> float:
        return float(sum(2 * s[0] * s[1] for n, s in self.parameter_shapes().items() if n.endswith("kernel")))

    def saved_activations_per_sample(self) -> int:
        """Each dense layer's input (a ReLU's output is the next layer's input, one tensor) and
        the logits the loss keeps: features + depth x hidden + 10."""
        return self.features + self.depth * self.hidden + NUM_CLASSES

    def activation_bytes_per_sample(self, compute_bytes: int, autocast: bool) -> float:
        """Bytes one sample holds at a torch training step's peak (`suites.predict.memory`): the
        saved elements (`saved_activations_per_sample`) in the compute dtype and the fp32 input
        (under autocast the first layer keeps a compute-dtype copy of it, counted in the saved)."""
        return float(compute_bytes * self.saved_activations_per_sample() + FP32_BYTES * self.features)
