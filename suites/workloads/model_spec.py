"""What a built-in model is, framework-neutral: the `ModelSpec` base and the pieces specs share.

Each model is a `ModelSpec`: its parameters (names, shapes and a seeded NumPy initialisation
in a canonical layout: dense kernels (in, out), conv kernels HWIO, NHWC images), its forward
FLOPs per sample, and how to draw a batch. The torch and TF implementations build the same
function from the same arrays, so their losses and gradients can be compared with each other
and with the single-device full-batch result. A spec names its implementations as data
(`ModelSpec.implementations`: "module:attribute" in its own folder), which the framework layer's
catalogues (`suites.frameworks.torch.catalog`, `suites.frameworks.tf.catalog`) import: this layer
never imports a framework. The built-in specs and their implementations live in `suites.models`,
one folder per model.

A spec's sizes are `train_step` parameters where its fields are declared with `size`
(`suites.workloads.training.SIZE_PARAMS`); its `rehearsal_sizes` are the small ones a CPU
rehearsal of a GPU case sets.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar, Mapping

import numpy as np

from suites.cases.vocabulary import Framework

NUM_CLASSES = 10
#: Standard deviation of the embedding tables' initial values.
EMBEDDING_STD = 0.02
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

    #: Framework -> "module:attribute" of the model's implementation in it, the module a sibling
    #: of the spec's in its model folder (`torch_model:TorchResNet50`): torch, a `TorchModel`
    #: subclass taking the spec; TF, a function of the spec that returns its layers (a list, what
    #: model and pipeline parallelism split) or one forward. Data only: the framework's catalogue
    #: imports it (`suites.frameworks.model_folders.model_implementation`). A subclass inherits
    #: its base's (BERT and GPT-2 are transformers).
    #: Whether building or stepping the model calls the user's code (`UserModel`).
    runs_user_code: ClassVar[bool] = False
    implementations: ClassVar[Mapping[Framework, str]] = {}
    #: The size parameters a CPU rehearsal of a GPU case sets (`suites.runner.rehearsal`): a
    #: short, shallow, narrow version of the same architecture, each key one of the spec's
    #: `size_fields` (heads that divide over 2, 4 and 8 tensor-parallel ranks). A model with size
    #: fields declares its own, empty where its defaults are a CPU's size already
    #: (tests/test_rehearsal_sizes.py checks that it does); a subclass inherits its base's.
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {}

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
