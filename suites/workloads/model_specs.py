"""The model specs a training step trains, framework-neutral: architectures, FLOPs, weights, data.

Each model is a `ModelSpec`: its parameters (names, shapes and a seeded NumPy initialisation
in a canonical layout: dense kernels (in, out), conv kernels HWIO, NHWC images), its forward
FLOPs per sample, and how to draw a batch. The torch and TF implementations build the same
function from the same arrays, so their losses and gradients can be compared with each other
and with the single-device full-batch result. The standard models (`transformers`, `resnet`)
build on the specs here; the `train_step` workload (`training`) gathers them all.

One step's update is plain SGD or Adam (`OPTIMIZERS`), with the same hyperparameters in both
frameworks, so the update is the same function everywhere.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from suites.cases.vocabulary import Framework

NUM_CLASSES = 10
#: Standard deviation of the embedding tables' initial values.
EMBEDDING_STD = 0.02
#: Adam's hyperparameters: torch.optim.Adam's defaults (no weight decay, no AMSGrad).
ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8


@dataclass(frozen=True)
class OptimizerSpec:
    """An optimizer of `train_step`, applied the same way by both frameworks."""

    name: str
    learning_rate: float
    #: Optimizer states kept per parameter, fp32 (Adam: the first and second moments).
    states_per_parameter: int
    #: SGD's momentum (0: plain SGD).
    momentum: float = 0.0
    #: L2 weight decay added to the gradient (SGD's), or decoupled decay (AdamW's).
    weight_decay: float = 0.0


#: The optimizers a case may name. Adam's first steps move every parameter by about the learning
#: rate, so a layer's output by about lr x fan-in: at SGD's 0.01 the default models' loss goes
#: from ~3 to ~30 in two steps, and at torch's default 1e-3 so does that of models 1024 wide or
#: more (a 2048-wide mlp: 3 -> 18). On such a diverging trajectory bf16's rounding alone moves the
#: loss by 3-30%, and the loss-trajectory check cannot tell a bug from it. At 1e-4 the loss stays
#: in range from the default sizes to a 4096-wide mlp and a 4-layer, 256-wide transformer, with
#: bf16 within 3e-3 of fp32 (a tenth of its tolerance).
OPTIMIZERS: dict[str, OptimizerSpec] = {
    "sgd": OptimizerSpec("sgd", learning_rate=0.01, states_per_parameter=0),
    "adam": OptimizerSpec("adam", learning_rate=1e-4, states_per_parameter=2),
    # The published recipes' optimizers: ResNet-50's SGD with momentum 0.9 and weight decay 1e-4
    # (He et al. 2015; torchvision's reference recipe), the transformers' AdamW with decoupled
    # weight decay 0.1 (GPT-2 as nanoGPT/llm.c train it). The learning rates are the checks' (the
    # timed work does not depend on them).
    "momentum": OptimizerSpec("momentum", learning_rate=0.01, states_per_parameter=1, momentum=0.9,
                              weight_decay=1e-4),
    "adamw": OptimizerSpec("adamw", learning_rate=1e-4, states_per_parameter=2, weight_decay=0.1),
}
#: Samples per device in the numerics check's batch (`TrainStep.check_workload`): two, so that a
#: replica's local batch statistics are over more than one sample.
CHECK_SAMPLES_PER_DEVICE = 2
#: Metadata key of a spec field that is a `train_step` parameter; its value is the help text.
SIZE_HELP = "train_step size"
#: Metadata key of the values such a field may take, where they are few.
SIZE_CHOICES = "train_step size choices"


def size(default: int | str, help: str, choices: tuple[int | str, ...] | None = None) -> Any:
    """A spec field that a `train_step` case may set (a size parameter of that model, or
    another choice of it, such as a string mode), of its default's type."""
    return field(default=default, metadata={SIZE_HELP: help, SIZE_CHOICES: choices})


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

    @classmethod
    def size_fields(cls) -> dict[str, Field]:
        """The fields a `train_step` case may set, by name (declared with `size`)."""
        return {f.name: f for f in fields(cls) if SIZE_HELP in f.metadata}

    def size_problems(self) -> list[str]:
        """Why these sizes make no model (e.g. heads that do not divide d_model)."""
        return []

    def framework_problem(self, framework: Framework) -> str | None:
        """Why `framework` cannot run the model as these parameters ask, or None."""
        return None

    def saved_activations_per_sample(self) -> int | None:
        """Elements the backward pass keeps per sample, where that is simple to count; None
        where it is not estimated."""
        return None

    def init_weights(self, seed: int = 0) -> dict[str, np.ndarray]:
        """He-style normal init for kernels, zeros for biases, ones for norm scales, N(0, 0.02)
        for embedding tables (GPT-2's and BERT's initializer range)."""
        rng = np.random.default_rng(seed)
        weights = {}
        for name, shape in self.parameter_shapes().items():
            if name.endswith(".embedding"):
                weights[name] = (rng.standard_normal(shape) * EMBEDDING_STD).astype(np.float32)
            elif name.endswith(("bias", "beta")):
                weights[name] = np.zeros(shape, np.float32)
            elif name.endswith("gamma"):
                weights[name] = np.ones(shape, np.float32)
            else:
                fan_in = int(np.prod(shape[:-1]))
                weights[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        return weights

    @property
    def tokens_per_sample(self) -> int | None:
        """Tokens in one sample (a sequence model's length), for tokens/s and MFU; None for
        models of no tokens."""
        return None

    @property
    def input_vocabulary(self) -> int | None:
        """A language model's vocabulary: its inputs are token ids in [0, vocabulary) (int64).
        None: float inputs."""
        return None

    @property
    def loss(self) -> str:
        """"cross_entropy" (integer class labels), "token_cross_entropy" (a label per token of
        `target_shape`, the mean over every token of the batch) or "mse" (float targets)."""
        return "cross_entropy"

    @property
    def num_classes(self) -> int:
        """Classes of a cross-entropy model's labels."""
        return NUM_CLASSES

    @property
    def batch_statistics(self) -> str | None:
        """How the model's batch normalisation computes its statistics under data parallelism:
        "local" (per replica) or "sync" (over the global batch); None: it has no batch norm,
        and its function of a batch does not depend on how the batch is split."""
        return None

    @property
    def target_shape(self) -> tuple[int, ...]:
        """Shape of one sample's target: () for class labels."""
        return tuple(self.make_batch(1, 0)[1].shape[1:])

    def make_batch(self, batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """A deterministic random batch: float32 inputs and int64 class labels."""
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((batch, *self.input_shape)).astype(np.float32)
        y = rng.integers(0, self.num_classes, size=batch).astype(np.int64)
        return x, y


@dataclass(frozen=True)
class Mlp(ModelSpec):
    """dense(features->hidden)+relu, (depth-1) x dense(hidden->hidden)+relu, dense(hidden->10)."""

    name: ClassVar[str] = "mlp"
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


#: Memory layouts of a convolutional net's tensors in torch: "channels_last" (NHWC in memory: what
#: cuDNN's fastest kernels take and DeepLearningExamples, timm and torchvision's recipes train in;
#: oneDNN's CPU training step of the CPU ResNet measured 1.16x faster in it than in NCHW, torch
#: 2.13, one thread) or "nchw".
MEMORY_FORMATS = ("channels_last", "nchw")


@dataclass(frozen=True)
class ConvLayout:
    """A convolutional net's `memory_format` parameter. TensorFlow's convolutions here are NHWC
    (channels last) always, so "nchw" is a torch-only departure."""

    memory_format: str = size("channels_last", "torch conv nets: channels_last (NHWC in memory, the default) "
                                               "or nchw", choices=MEMORY_FORMATS)

    def framework_problem(self, framework: Framework) -> str | None:
        if framework is Framework.TF and self.memory_format == "nchw":
            return ("memory_format = 'nchw' is a torch layout; TF's convolutions run NHWC "
                    "(channels_last) here")
        return None


@dataclass(frozen=True)
class ResidualCnn(ConvLayout, ModelSpec):
    """stem conv3x3(3->c)+relu; `blocks` x [conv3x3+relu, conv3x3, +skip, relu];
    global average pool; dense(c->10). 'same' padding, stride 1, no batch norm (so that
    data-parallel results equal the full-batch result exactly, without cross-replica BN)."""

    name: ClassVar[str] = "cnn"
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


@dataclass(frozen=True)
class TransformerBlock(ModelSpec):
    """`layers` identical pre-norm encoder blocks on (seq, d) inputs, each
    x + MHA(LN(x)); x + FFN(LN(x)) with FFN = dense(d->ffn)+gelu(tanh approx)+dense(ffn->d);
    then mean over seq, dense(d->10). LayerNorm eps 1e-5; attention softmax(QK^T/sqrt(d_head))V,
    no mask, no dropout. Block i's parameters are named ``block{i}.<ln1|attn|ln2|ffn>...``.

    The class variables below are the architecture's choices; the standard transformers
    (`suites.workloads.transformers`: BERT, GPT-2) are subclasses that set them, so one torch
    module and one TF forward build them all."""

    name: ClassVar[str] = "transformer"
    #: Each position attends to itself and earlier positions only (a decoder's mask).
    causal: ClassVar[bool] = False
    #: Pre-norm (x + f(LN(x))) or post-norm (LN(x + f(x)), BERT's).
    norm_first: ClassVar[bool] = True
    #: Biases on the q, k, v projections (BERT, GPT-2) or none.
    qkv_bias: ClassVar[bool] = False
    #: A learned positional embedding (seq, d) added to the inputs, named ``pos.embedding``.
    learned_positions: ClassVar[bool] = False
    #: A LayerNorm (``input_norm``) of the inputs (plus positions) before the first block (BERT's).
    input_norm: ClassVar[bool] = False
    #: A LayerNorm (``final_norm``) after the last block (GPT-2's ln_f).
    final_norm: ClassVar[bool] = False
    #: GELU's tanh approximation (GPT-2) or the exact erf form (BERT).
    gelu_tanh: ClassVar[bool] = True
    layer_norm_eps: ClassVar[float] = 1e-5

    seq: int = size(64, "sequence length")
    d_model: int = size(128, "model width")
    heads: int = size(4, "attention heads (must divide d_model)")
    ffn: int = size(512, "feed-forward width")
    layers: int = size(1, "stacked encoder blocks")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.seq, self.d_model)

    def size_problems(self) -> list[str]:
        if self.d_model % self.heads:
            return [f"heads = {self.heads} does not divide d_model = {self.d_model}"]
        return []

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        d, f = self.d_model, self.ffn
        shapes: dict[str, tuple[int, ...]] = {}
        if self.learned_positions:
            shapes["pos.embedding"] = (self.seq, d)
        if self.input_norm:
            shapes.update({"input_norm.gamma": (d,), "input_norm.beta": (d,)})
        qkv = [(f"attn.{p}.{leaf}", shape) for p in "qkv"
               for leaf, shape in (("kernel", (d, d)), ("bias", (d,)))[:2 if self.qkv_bias else 1]]
        for i in range(self.layers):
            shapes.update({f"block{i}.{name}": shape for name, shape in (
                ("ln1.gamma", (d,)), ("ln1.beta", (d,)), *qkv,
                ("attn.o.kernel", (d, d)), ("attn.o.bias", (d,)),
                ("ln2.gamma", (d,)), ("ln2.beta", (d,)),
                ("ffn.in.kernel", (d, f)), ("ffn.in.bias", (f,)),
                ("ffn.out.kernel", (f, d)), ("ffn.out.bias", (d,)))})
        if self.final_norm:
            shapes.update({"final_norm.gamma": (d,), "final_norm.beta": (d,)})
        shapes["head.kernel"] = (d, NUM_CLASSES)
        shapes["head.bias"] = (NUM_CLASSES,)
        return shapes

    def forward_flops_per_sample(self) -> float:
        s, d, f = self.seq, self.d_model, self.ffn
        projections = 4 * 2 * s * d * d
        attention = 2 * 2 * s * s * d  # QK^T and AV over all heads (a causal mask saves none here)
        feed_forward = 2 * 2 * s * d * f
        return float(self.layers * (projections + attention + feed_forward) + 2 * d * NUM_CLASSES)

    @property
    def tokens_per_sample(self) -> int:
        return self.seq
