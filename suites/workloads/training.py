"""Training-step workloads, framework-neutral: model architectures, FLOPs, weights, data.

Each model is a `ModelSpec`: its parameters (names, shapes and a seeded NumPy initialisation
in a canonical layout: dense kernels (in, out), conv kernels HWIO, NHWC images), its forward
FLOPs per sample, and how to draw a batch. The torch and TF implementations build the same
function from the same arrays, so their losses and gradients can be compared with each other
and with the single-device full-batch result.

One step = forward + backward + optimizer update (plain SGD, so the update is the same
function everywhere). Loss: the spec's `loss` (softmax cross-entropy for the built-in models;
user models may choose squared error), mean over the global batch.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Mapping

import numpy as np

from suites.cases.case import ParamValue
from suites.cases.vocabulary import Framework
from suites.workloads.base import Param, Workload

LEARNING_RATE = 0.01
NUM_CLASSES = 10


@dataclass(frozen=True)
class ModelSpec(ABC):
    name: ClassVar[str]

    @property
    @abstractmethod
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample (NHWC images without N; (seq, d) for sequences; (features,))."""

    @abstractmethod
    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Ordered parameter names -> shapes, canonical layout."""

    @abstractmethod
    def forward_flops_per_sample(self) -> float:
        """Multiply-adds x 2 of the forward pass (matmuls/convs; elementwise ops ignored)."""

    def init_weights(self, seed: int = 0) -> dict[str, np.ndarray]:
        """He-style normal init for kernels, zeros for biases, ones for norm scales."""
        rng = np.random.default_rng(seed)
        weights = {}
        for name, shape in self.parameter_shapes().items():
            if name.endswith(("bias", "beta")):
                weights[name] = np.zeros(shape, np.float32)
            elif name.endswith("gamma"):
                weights[name] = np.ones(shape, np.float32)
            else:
                fan_in = int(np.prod(shape[:-1]))
                weights[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        return weights

    @property
    def loss(self) -> str:
        """"cross_entropy" (integer class labels) or "mse" (float targets of `target_shape`)."""
        return "cross_entropy"

    @property
    def target_shape(self) -> tuple[int, ...]:
        """Shape of one sample's target: () for class labels."""
        return tuple(self.make_batch(1, 0)[1].shape[1:])

    def make_batch(self, batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """A deterministic random batch: float32 inputs and int64 class labels."""
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((batch, *self.input_shape)).astype(np.float32)
        y = rng.integers(0, NUM_CLASSES, size=batch).astype(np.int64)
        return x, y


@dataclass(frozen=True)
class Mlp(ModelSpec):
    """dense(features->hidden)+relu, (depth-1) x dense(hidden->hidden)+relu, dense(hidden->10)."""

    name: ClassVar[str] = "mlp"
    features: int = 256
    hidden: int = 512
    depth: int = 3

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


@dataclass(frozen=True)
class ResidualCnn(ModelSpec):
    """stem conv3x3(3->c)+relu; `blocks` x [conv3x3+relu, conv3x3, +skip, relu];
    global average pool; dense(c->10). 'same' padding, stride 1, no batch norm (so that
    data-parallel results equal the full-batch result exactly, without cross-replica BN)."""

    name: ClassVar[str] = "cnn"
    image: int = 32
    channels: int = 32
    blocks: int = 2

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


@dataclass(frozen=True)
class TransformerBlock(ModelSpec):
    """Pre-norm encoder block on (seq, d) inputs: x + MHA(LN(x)); x + FFN(LN(x)) with
    FFN = dense(d->ffn)+gelu(tanh approx)+dense(ffn->d); then mean over seq, dense(d->10).
    LayerNorm eps 1e-5; attention softmax(QK^T/sqrt(d_head))V, no mask, no dropout."""

    name: ClassVar[str] = "transformer"
    seq: int = 64
    d_model: int = 128
    heads: int = 4
    ffn: int = 512

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.seq, self.d_model)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        d, f = self.d_model, self.ffn
        return {
            "ln1.gamma": (d,), "ln1.beta": (d,),
            "attn.q.kernel": (d, d), "attn.k.kernel": (d, d), "attn.v.kernel": (d, d),
            "attn.o.kernel": (d, d), "attn.o.bias": (d,),
            "ln2.gamma": (d,), "ln2.beta": (d,),
            "ffn.in.kernel": (d, f), "ffn.in.bias": (f,),
            "ffn.out.kernel": (f, d), "ffn.out.bias": (d,),
            "head.kernel": (d, NUM_CLASSES), "head.bias": (NUM_CLASSES,),
        }

    def forward_flops_per_sample(self) -> float:
        s, d, f = self.seq, self.d_model, self.ffn
        projections = 4 * 2 * s * d * d
        attention = 2 * 2 * s * s * d  # QK^T and AV over all heads
        feed_forward = 2 * 2 * s * d * f
        return float(projections + attention + feed_forward + 2 * d * NUM_CLASSES)


#: Model name -> a zero-argument factory of its spec; user models join through `register_model`.
MODELS: dict[str, Callable[[], ModelSpec]] = {m.name: m for m in (Mlp, ResidualCnn, TransformerBlock)}


def register_model(name: str, factory: Callable[[], ModelSpec]) -> None:
    if name in MODELS and MODELS[name] is not factory:
        raise ValueError(f"a model named {name!r} is already registered; choose another name")
    MODELS[name] = factory


class TrainStep(Workload):
    """One optimizer step of a model. `batch` is per device under weak scaling (the default:
    global batch = batch x n_devices) and global under strong scaling (split across devices)."""

    name = "train_step"
    kind = "training"
    params = (
        Param("model", type=str, minimum=None, help="a built-in model (mlp, cnn, transformer) or a registered user model"),
        Param("batch", help="per-device batch (weak scaling) or global batch (strong scaling)"),
        Param("scaling", type=str, default="weak", choices=("weak", "strong"), minimum=None),
        Param("placement", type=str, default="replicated", choices=("replicated", "param_server"),
              minimum=None, help="strategy towers: variables replicated on every tower, or on a "
                                 "parameter device (the CPU) that averages and applies the update"),
    )
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "suites.frameworks.torch.training:TorchTrainStep",
        Framework.TF: "suites.frameworks.tf.training:TfTrainStep",
    }

    @classmethod
    def shape_problems(cls, params: Mapping[str, ParamValue]) -> list[str]:
        if params.get("model") not in MODELS:
            return [f"model {params.get('model')!r} is not one of {', '.join(MODELS)} "
                    f"(user models must be registered before the grid is read)"]
        return []

    def unavailable_reason(self) -> str | None:
        builders = getattr(self.model, "builders", None)
        if builders is not None and self.case.framework not in builders:
            return f"user model {self.p['model']!r} has no {self.case.framework} builder"
        return None

    @property
    def model(self) -> ModelSpec:
        return MODELS[str(self.p["model"])]()

    @property
    def global_batch(self) -> int:
        batch = int(self.p["batch"])
        return batch * self.case.n_devices if self.p["scaling"] == "weak" else batch

    def split_problem(self, parts: int, what: str) -> str | None:
        if self.global_batch % parts:
            return f"the global batch of {self.global_batch} does not split evenly over {parts} {what}"
        return None

    @property
    def per_device_batch(self) -> int:
        return self.global_batch // self.case.n_devices

    def flops_per_step(self) -> float:
        """Training step ~ 3x forward (backward costs about twice the forward)."""
        return 3.0 * self.model.forward_flops_per_sample() * self.global_batch

    def samples_per_step(self) -> int:
        return self.global_batch
