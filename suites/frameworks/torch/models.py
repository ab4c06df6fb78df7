"""PyTorch modules for the neutral `ModelSpec`s, built from the spec's canonical weights.

The canonical layout (see suites/workloads/training.py) is TensorFlow's: dense kernels
(in, out), conv kernels HWIO, NHWC images. Torch stores a Linear weight (out, in), a Conv2d
weight OIHW and takes NCHW images, so weights are transposed on the way in (and gradients on
the way out), and canonical image batches are permuted to NCHW. Parameter names map one to
one: ``<path>.kernel``/``.gamma`` -> ``<path>.weight``, ``.bias``/``.beta`` -> ``<path>.bias``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suites.cases.vocabulary import Framework
from suites.frameworks.torch.qkv import FusedQkv, HeadLayout, fuse, fused_names, unfuse
from suites.workloads.training import NUM_CLASSES, ModelSpec, Mlp, ResidualCnn, TransformerBlock
from suites.workloads.user_model import USER_MODEL_SEED, UserModel

LAYER_NORM_EPS = 1e-5


def torch_name(canonical: str) -> str:
    path, _, leaf = canonical.rpartition(".")
    return f"{path}.{'weight' if leaf in ('kernel', 'gamma', 'embedding') else 'bias'}"


def to_torch_layout(array: np.ndarray) -> np.ndarray:
    """Dense (in, out) -> (out, in); conv HWIO -> OIHW; vectors unchanged."""
    if array.ndim == 2:
        return array.T
    if array.ndim == 4:
        return array.transpose(3, 2, 0, 1)
    return array


def to_canonical_layout(array: np.ndarray) -> np.ndarray:
    """The inverse of `to_torch_layout`."""
    if array.ndim == 2:
        return array.T
    if array.ndim == 4:
        return array.transpose(2, 3, 1, 0)
    return array


def torch_array(canonical: str, array: np.ndarray) -> np.ndarray:
    """A canonical parameter in torch's layout: kernels transposed (`to_torch_layout`), anything
    else (biases, norm scales, a positional embedding (seq, d)) as it is."""
    return to_torch_layout(array) if canonical.endswith(".kernel") else array


def canonical_array(canonical: str, array: np.ndarray) -> np.ndarray:
    """The inverse of `torch_array`."""
    return to_canonical_layout(array) if canonical.endswith(".kernel") else array


def whole(gradient: torch.Tensor, gather: bool) -> torch.Tensor:
    """`gradient` itself, or with `gather` the full tensor of a DTensor gradient (FSDP's shards,
    a tensor-parallel split): a collective, so every rank gathers the same tensors in order."""
    if gather:
        from torch.distributed.tensor import DTensor

        if isinstance(gradient, DTensor):
            return gradient.full_tensor()
    return gradient


class TorchModel(nn.Module):
    """A spec's function in torch. Subclasses build the layers and define `forward`."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample as `forward` takes it (NCHW images, without N)."""
        return self.spec.input_shape

    def input_from_canonical(self, batch: np.ndarray) -> np.ndarray:
        """A canonical-layout batch in the layout `forward` takes."""
        return batch

    @property
    def memory_format(self) -> torch.memory_format:
        """The layout of the model's 4-D tensors in memory: channels_last where the spec's
        `memory_format` says so (a conv net's default), else torch's contiguous NCHW."""
        if getattr(self.spec, "memory_format", None) == "channels_last":
            return torch.channels_last
        return torch.contiguous_format

    def in_memory_format(self, batch: torch.Tensor) -> torch.Tensor:
        """`batch` laid out in memory as the model's 4-D tensors are (`memory_format`)."""
        return batch.contiguous(memory_format=self.memory_format) if batch.dim() == 4 else batch

    def random_inputs(self, shape: tuple[int, ...], generator: torch.Generator,
                      device: torch.device) -> torch.Tensor:
        """A random batch of `shape` as `forward` takes it: token ids uniform over a language
        model's vocabulary, else standard normal floats in the model's memory format."""
        vocabulary = self.spec.input_vocabulary
        if vocabulary:
            return torch.randint(0, vocabulary, shape, generator=generator, device=device)
        return self.in_memory_format(torch.randn(shape, generator=generator, device=device))

    def input_tensor(self, batch: np.ndarray, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """A canonical batch on `device` as `forward` takes it: token ids as int64, floats in
        `dtype` and the model's memory format."""
        array = np.ascontiguousarray(self.input_from_canonical(batch))
        if np.issubdtype(array.dtype, np.integer):
            return torch.from_numpy(array).to(device=device, dtype=torch.int64)
        return self.in_memory_format(torch.from_numpy(array).to(device=device, dtype=dtype))

    @property
    def head_layout(self) -> HeadLayout | None:
        """A transformer's attention heads, whose q, k and v one fused layer computes
        (`suites.frameworks.torch.qkv`); None for a model without attention."""
        return None

    def load_canonical(self, weights: dict[str, np.ndarray]) -> None:
        layout = self.head_layout
        weights = fuse(layout, weights) if layout else weights
        parameters = dict(self.named_parameters())
        if set(map(torch_name, weights)) != set(parameters):
            raise ValueError(f"{type(self).__name__}: weights {sorted(weights)} do not match "
                             f"parameters {sorted(parameters)}")
        with torch.no_grad():
            for name, array in weights.items():
                target = parameters[torch_name(name)]
                target.copy_(torch.from_numpy(np.ascontiguousarray(torch_array(name, array))))

    def canonical_gradients(self, gather: bool = False) -> dict[str, np.ndarray]:
        """Gradients of the last backward pass, float64, in the canonical layout; `gather`:
        DTensor gradients gathered to full tensors first (`whole`)."""
        parameters = dict(self.named_parameters())
        return self.from_module({name: canonical_array(name, whole(parameters[torch_name(name)].grad, gather)
                                                       .detach().to("cpu", torch.float64).numpy())
                                 for name in self.module_names()})

    def module_names(self) -> list[str]:
        """The canonical names of the module's own parameters, in order: the spec's, with an
        attention's q, k and v as their fused layer (`head_layout`)."""
        names = list(self.spec.parameter_shapes())
        return fused_names(names) if self.head_layout else names

    def from_module(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Arrays named by `module_names` (canonical layout) as the spec's parameters, in order."""
        layout = self.head_layout
        return unfuse(layout, arrays, list(self.spec.parameter_shapes())) if layout else arrays

    def stage_layers(self) -> list["StageLayer"] | None:
        """The model as a sequence of layers, in order, whose composition is `forward`: what
        pipeline and model parallelism split into contiguous groups (`LayerGroup`). None: a
        model that is no such sequence (a user's module)."""
        return None


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


class _Attention(nn.Module):
    def __init__(self, spec: TransformerBlock) -> None:
        super().__init__()
        d_model = spec.d_model
        self.causal = spec.causal
        self.qkv = FusedQkv(d_model, HeadLayout(spec.heads, spec.heads, d_model // spec.heads), spec.qkv_bias)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # softmax(Q K^T / sqrt(d_head)) V, causal where the spec says, no dropout: SDPA's default
        # scale; the heads this process holds (under tensor parallelism its share).
        out = F.scaled_dot_product_attention(*self.qkv.heads(x), is_causal=self.causal)
        return self.o(out.transpose(1, 2).reshape(*x.shape[:2], -1))


class _EncoderBlock(nn.Module):
    """One block: pre-norm x + MHA(LN(x)); x + FFN(LN(x)), or post-norm (BERT's)
    x = LN(x + MHA(x)); x = LN(x + FFN(x))."""

    def __init__(self, spec: TransformerBlock) -> None:
        super().__init__()
        d_model = spec.d_model
        self.norm_first = spec.norm_first
        self.gelu = "tanh" if spec.gelu_tanh else "none"
        self.ln1 = nn.LayerNorm(d_model, eps=spec.layer_norm_eps)
        self.attn = _Attention(spec)
        self.ln2 = nn.LayerNorm(d_model, eps=spec.layer_norm_eps)
        # "in" is a Python keyword, so the feed-forward pair lives in a ModuleDict.
        self.ffn = nn.ModuleDict({"in": nn.Linear(d_model, spec.ffn), "out": nn.Linear(spec.ffn, d_model)})

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn["out"](F.gelu(self.ffn["in"](x), approximate=self.gelu))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm_first:
            x = x + self.attn(self.ln1(x))
            return x + self._feed_forward(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self._feed_forward(x))


class _LearnedPositions(nn.Module):
    """x + a learned (seq, d) positional embedding (BERT's, GPT-2's position table)."""

    def __init__(self, seq: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(seq, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight


class _SegmentA(nn.Module):
    """x + the first row of BERT's segment (token type) table: every token in segment A, as
    HF's default token_type_ids (zeros) give."""

    def __init__(self, token_types: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(token_types, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight[0]


class _MaskedLmHead(nn.Module):
    """BERT's MLM head: LN(GELU(dense(x))), then the decoder: the token embedding (tied, passed
    in) with the head's own bias."""

    def __init__(self, spec: TransformerBlock) -> None:
        super().__init__()
        self.dense = nn.Linear(spec.d_model, spec.d_model)
        self.norm = nn.LayerNorm(spec.d_model, eps=spec.layer_norm_eps)
        self.bias = nn.Parameter(torch.empty(spec.input_vocabulary or 0))

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(F.gelu(self.dense(x))), table, self.bias)


class TorchTransformerBlock(TorchModel):
    """The spec's optional token embedding (``tok``, a language model's), segment (``segment``,
    BERT's) and positional embedding (``pos``) and input LayerNorm (``input_norm``), `spec.layers`
    blocks registered as ``block0``, ``block1``, ... (the canonical names' prefixes), an optional
    final LayerNorm (``final_norm``), then the head: a language model's logits at every position
    (GPT-2: the token embedding, tied; BERT: its MLM head ``mlm``), else the mean over the
    sequence and the 10-class ``head``. Serves the built-in transformer, BERT and GPT-2 (their
    specs' class variables)."""

    def __init__(self, spec: TransformerBlock) -> None:
        super().__init__(spec)
        self.layers = spec.layers
        vocabulary = spec.input_vocabulary
        if vocabulary:
            self.tok = nn.Embedding(vocabulary, spec.d_model)
        if "segment.embedding" in spec.parameter_shapes():
            self.segment = _SegmentA(*spec.parameter_shapes()["segment.embedding"])
        if spec.learned_positions:
            self.pos = _LearnedPositions(spec.seq, spec.d_model)
        if spec.input_norm:
            self.input_norm = nn.LayerNorm(spec.d_model, eps=spec.layer_norm_eps)
        for i in range(spec.layers):
            self.add_module(f"block{i}", _EncoderBlock(spec))
        if spec.final_norm:
            self.final_norm = nn.LayerNorm(spec.d_model, eps=spec.layer_norm_eps)
        if "mlm.bias" in spec.parameter_shapes():
            self.mlm = _MaskedLmHead(spec)
        elif not vocabulary:
            self.head = nn.Linear(spec.d_model, NUM_CLASSES)

    @property
    def head_layout(self) -> HeadLayout:
        return HeadLayout(self.spec.heads, self.spec.heads, self.spec.d_model // self.spec.heads)

    @property
    def tied_modules(self) -> tuple[str, ...]:
        """Modules used by more than one layer: a tied token embedding, also the LM head."""
        return ("tok",) if getattr(self.spec, "tied_embedding", False) else ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_layers(self.stage_layers(), self._modules, x)

    def stage_layers(self) -> list["StageLayer"]:
        """Each block (the first with the embeddings and input norm before it), then the head
        (with the final norm): the residual stream is the one activation between them (a
        pipeline of a one-block transformer has the head alone on its last stage). A tied
        language model's last layer uses the token embedding too (so it cannot be split into
        stages: `suites.strategies.stages.layers_reason`)."""
        inputs = [name for name in ("tok", "segment", "pos", "input_norm") if name in self._modules]
        blocks = [(*(inputs if i == 0 else ()), f"block{i}") for i in range(self.layers)]
        norms = [name for name in ("final_norm",) if name in self._modules]
        if "mlm" in self._modules:
            head = StageLayer(("mlm", "tok"), lambda modules, x: modules["mlm"](x, modules["tok"].weight))
        elif "tok" in self._modules:
            head = StageLayer((*norms, "tok"), tied_head(norms))
        else:
            head = StageLayer((*norms, "head"), pooled_head(norms))
        return [*(StageLayer(names, modules_in_order(names)) for names in blocks), head]


def modules_in_order(names: Sequence[str]) -> Callable[[Mapping[str, nn.Module], torch.Tensor], torch.Tensor]:
    """A `StageLayer` function that applies the modules `names`, in order."""
    def forward(modules: Mapping[str, nn.Module], x: torch.Tensor) -> torch.Tensor:
        for name in names:
            x = modules[name](x)
        return x
    return forward


def tied_head(norms: Sequence[str]) -> Callable[[Mapping[str, nn.Module], torch.Tensor], torch.Tensor]:
    """A `StageLayer` function: the modules `norms` in order, then logits over the vocabulary
    at every position from the token embedding ``tok`` (GPT-2's tied LM head, no bias)."""
    def forward(modules: Mapping[str, nn.Module], x: torch.Tensor) -> torch.Tensor:
        return F.linear(modules_in_order(norms)(modules, x), modules["tok"].weight)
    return forward


def pooled_head(norms: Sequence[str]) -> Callable[[Mapping[str, nn.Module], torch.Tensor], torch.Tensor]:
    """A `StageLayer` function: the modules `norms` in order, the mean over the sequence, ``head``."""
    def forward(modules: Mapping[str, nn.Module], x: torch.Tensor) -> torch.Tensor:
        return modules["head"](modules_in_order(norms)(modules, x).mean(dim=1))
    return forward


class TorchUserModel(TorchModel):
    """A user's module. Its own parameter names and torch layout are the canonical ones here,
    and its weights come from the builder after `torch.manual_seed`, so every copy is equal."""

    def __init__(self, spec: UserModel) -> None:
        super().__init__(spec)
        torch.manual_seed(USER_MODEL_SEED)
        self.inner = spec.builders[Framework.TORCH]()

    def load_canonical(self, weights: dict[str, np.ndarray]) -> None:
        if weights:
            raise ValueError("a user model draws its own weights; it takes no canonical weights")

    def canonical_gradients(self, gather: bool = False) -> dict[str, np.ndarray]:
        return {name: whole(parameter.grad, gather).detach().to("cpu", torch.float64).numpy()
                for name, parameter in self.inner.named_parameters()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Softmax cross-entropy of (batch, seq, vocab) logits against (batch, seq) target tokens,
    the mean over every token."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


def loss_function(spec: ModelSpec) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Mean over the batch, as the spec declares: softmax cross-entropy (per sample or per
    token) or squared error."""
    return {"mse": F.mse_loss, "token_cross_entropy": token_cross_entropy}.get(spec.loss, F.cross_entropy)


@dataclass(frozen=True)
class StageLayer:
    """One layer of a model's `stage_layers`: the model's top-level submodules it uses (by
    name; their parameters are the canonical names with these prefixes) and the function of
    the activation it computes with them."""

    names: tuple[str, ...]
    forward: Callable[[Mapping[str, nn.Module], torch.Tensor], torch.Tensor]


def apply_layers(layers: Sequence[StageLayer], modules: Mapping[str, nn.Module], x: torch.Tensor) -> torch.Tensor:
    """`layers` applied in order to `x`, with `modules` (a model's or a group's own, by name)."""
    for layer in layers:
        x = layer.forward(modules, x)
    return x


class LayerGroup(nn.Module):
    """Contiguous `StageLayer`s of a model as one module: the model's own submodules, under
    their own names (so its parameter names are the model's), applied in order. A pipeline
    stage holds one; model parallelism places one on each device."""

    def __init__(self, model: TorchModel, layers: Sequence[StageLayer]) -> None:
        super().__init__()
        for layer in layers:
            for name in layer.names:
                self.add_module(name, model.get_submodule(name))
        self.layers = tuple(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_layers(self.layers, self._modules, x)


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
