"""What every PyTorch module of a neutral `ModelSpec` shares, built from the spec's canonical
weights: the `TorchModel` base, `build`, the losses, and the layers pipeline and model
parallelism split (`StageLayer`, `LayerGroup`). Each built-in model's own module lives in its
folder of `suites.models` (``torch_model.py``), found through its spec
(`suites.frameworks.model_folders.model_implementation`).

The canonical layout (see suites/workloads/model_spec.py) is TensorFlow's: dense kernels
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
from suites.frameworks.torch.qkv import HeadLayout, fuse, fused_names, unfuse
from suites.workloads.model_spec import ModelSpec
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
    a tensor-parallel split): a collective, so every rank gathers the same tensors in order.

    A CUDA gradient on a mesh of every rank is gathered from host copies of its shards over a CPU
    mesh of the same ranks: on an H200 (torch 2.11) `full_tensor()` of a CUDA DTensor through gloo
    (ranks sharing one GPU) crashed the rank with a segfault in the all-gather's wait, though the
    training step's own collectives on the same tensors ran. A check's gather is off the clock, so
    the copy costs nothing timed. A sub-mesh (one dimension of fsdp_tensor's 2-D mesh) is gathered
    as it is: building a CPU mesh of it would have each rank create a process group of other ranks
    than its peers do, which hangs (seen on the CPU)."""
    if gather:
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        if isinstance(gradient, DTensor):
            mesh = gradient.device_mesh
            if gradient.device.type == "cuda" and mesh.mesh.numel() == dist.get_world_size():
                on_host = DTensor.from_local(gradient.to_local().detach().cpu(), host_mesh(mesh),
                                             gradient.placements, run_check=False,
                                             shape=gradient.shape, stride=gradient.stride())
                return on_host.full_tensor()
            return gradient.full_tensor()
    return gradient


_HOST_MESHES: dict[int, tuple[object, object]] = {}


def host_mesh(mesh):
    """A CPU DeviceMesh over `mesh`'s ranks (every rank's: see `whole`), in its layout, made once
    per mesh (building one is a collective: every rank builds it at the same point, as `whole`'s
    callers do)."""
    from torch.distributed.device_mesh import DeviceMesh

    known = _HOST_MESHES.get(id(mesh))
    if known is None or known[0] is not mesh:
        known = (mesh, DeviceMesh("cpu", mesh.mesh, mesh_dim_names=mesh.mesh_dim_names))
        _HOST_MESHES[id(mesh)] = known
    return known[1]


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


def modules_in_order(names: Sequence[str]) -> Callable[[Mapping[str, nn.Module], torch.Tensor], torch.Tensor]:
    """A `StageLayer` function that applies the modules `names`, in order."""
    def forward(modules: Mapping[str, nn.Module], x: torch.Tensor) -> torch.Tensor:
        for name in names:
            x = modules[name](x)
        return x
    return forward


class TorchUserModel(TorchModel):
    """A user's module. Its own parameter names and torch layout are the canonical ones here,
    and its weights come from the builder after `torch.manual_seed`, so every copy is equal."""

    def __init__(self, spec: UserModel) -> None:
        super().__init__(spec)
        torch.manual_seed(USER_MODEL_SEED)
        self.inner = spec.build(Framework.TORCH)

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


def squared_error(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean squared error of outputs and targets of one shape. `F.mse_loss` would broadcast a
    (batch, 5) output against (batch, 1) targets with only a warning, and train a wrong model
    that passes its check; here that is an error naming both shapes."""
    if outputs.shape != targets.shape:
        raise ValueError(f"the model's outputs have shape {tuple(outputs.shape)} but its targets "
                         f"{tuple(targets.shape)}: mse compares them element by element")
    return F.mse_loss(outputs, targets)


def loss_function(spec: ModelSpec) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Mean over the batch, as the spec declares: softmax cross-entropy (per sample or per
    token) or squared error."""
    return {"mse": squared_error, "token_cross_entropy": token_cross_entropy}.get(spec.loss, F.cross_entropy)


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
