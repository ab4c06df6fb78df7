"""Parity: parbench's torch training step timed beside the canonical implementation that
practitioners train, on the same device, in the same precision, at the same sizes.

The canonical models: torchvision's ResNet (its `Bottleneck` stack, so also at the CPU's smaller
depths), and HF transformers' GPT2LMHeadModel and BertForMaskedLM built from a config of the
parbench model's sizes (no weights are downloaded; dropout 0, as parbench has none; SDPA
attention; GPT-2's tanh GELU as `gelu_pytorch_tanh`, the same function as its default `gelu_new`
in one fused kernel instead of eight elementwise ones, as parbench computes it (with `gelu_new`
parbench read 1.52x HF on an H200 in bf16, 2026-11-26; not yet re-measured on a GPU with this). Each is trained in a bare loop: zero_grad, forward under autocast (fp16 with a
GradScaler), its own loss (torchvision: cross-entropy of the logits; HF: the model's loss from
`labels`), backward, the same optimizer as the parbench case (`make_optimizer`: SGD momentum for
ResNet, AdamW, fused on CUDA, for the transformers), on random data drawn on the device, in the
memory layout parbench's model runs. parbench's side is its own `TorchTrainStep`, set up as
`parbench run` sets it up (its precision flags and cuDNN autotuning then hold for both).

Blocks of `steps` steps, each ended by a device sync, alternate A B B A (`suites.run.interleaved`).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from suites.cases.case import Case, ParamValue
from suites.cases.vocabulary import Precision
from suites.frameworks.torch import backend
from suites.frameworks.torch.training import make_optimizer
from suites.models.resnet.spec import ResNet50
from suites.models.transformer.spec import BertBase, Gpt2Small
from suites.run.interleaved import Interleaved, abba
from suites.workloads.training import ModelSpec, TrainStep

if TYPE_CHECKING:
    from suites.strategies.jobs import Job

Step = Callable[[], None]


@dataclass(frozen=True)
class Canonical:
    """How one canonical implementation is built and trained."""

    #: The package it comes from (imported when parity runs; its version is printed).
    package: str
    #: What it is, for the output.
    what: str
    #: (the imported package, the parbench spec) -> the module at the spec's sizes.
    build: Callable[[Any, ModelSpec], nn.Module]
    #: (module, inputs, targets) -> the loss its users train on.
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    #: How to get the package where it is missing.
    install: str
    #: Why the canonical model cannot take the spec's sizes, or None.
    sizes_problem: Callable[[ModelSpec], str | None] = lambda spec: None


def _torchvision_resnet(torchvision: Any, spec: ResNet50) -> nn.Module:
    resnet = torchvision.models.resnet
    return resnet.ResNet(resnet.Bottleneck, list(spec.stage_blocks), num_classes=spec.classes)


def _resnet_sizes_problem(spec: ResNet50) -> str | None:
    if spec.width != 64:
        return f"torchvision's ResNet is 64 wide at its first stage; this case sets width = {spec.width}"
    return None


def _hf_gpt2(transformers: Any, spec: Gpt2Small) -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=spec.vocab, n_positions=spec.seq, n_embd=spec.d_model, n_layer=spec.layers,
        n_head=spec.heads, n_inner=spec.ffn, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        activation_function="gelu_pytorch_tanh", attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(config)


def _hf_bert(transformers: Any, spec: BertBase) -> nn.Module:
    config = transformers.BertConfig(
        vocab_size=spec.vocab, hidden_size=spec.d_model, num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads, intermediate_size=spec.ffn, max_position_embeddings=spec.seq,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    return transformers.BertForMaskedLM(config)


def _classifier_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(module(x), y)


def _hf_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return module(input_ids=x, labels=y).loss


#: parbench model -> its canonical implementation.
CANONICAL: dict[str, Canonical] = {
    "resnet50": Canonical("torchvision", "torchvision.models.resnet.ResNet(Bottleneck)", _torchvision_resnet,
                          _classifier_loss, "install the torchvision release built for this torch",
                          _resnet_sizes_problem),
    "gpt2_small": Canonical("transformers", "transformers.GPT2LMHeadModel", _hf_gpt2, _hf_loss,
                            "pip install transformers"),
    "bert_base": Canonical("transformers", "transformers.BertForMaskedLM", _hf_bert, _hf_loss,
                           "pip install transformers"),
}


@dataclass(frozen=True)
class ParityResult:
    """parbench's figure and the canonical one, from interleaved blocks."""

    model: str
    case_id: str
    canonical: str
    canonical_version: str
    unit: str
    #: Work (samples or tokens) per step.
    per_step: int
    steps_per_block: int
    interleaved: Interleaved

    def per_s(self, seconds: tuple[float, ...]) -> float:
        return self.per_step * self.steps_per_block / statistics.median(seconds)

    @property
    def parbench_per_s(self) -> float:
        return self.per_s(self.interleaved.a_seconds)

    @property
    def canonical_per_s(self) -> float:
        return self.per_s(self.interleaved.b_seconds)


def unavailable_reason(model: str) -> str | None:
    """Why parity cannot run for `model` here (no canonical implementation; its package not
    importable), or None."""
    if model not in CANONICAL:
        return f"no canonical implementation is known for {model!r} (parity covers {', '.join(CANONICAL)})"
    canonical = CANONICAL[model]
    try:
        importlib.import_module(canonical.package)
    except ImportError as error:
        return f"{canonical.package} is not importable here ({error}); {canonical.install} to compare"
    return None


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(importlib.import_module(package), "__version__", "unknown"))


def _timed(step: Step, steps: int, device: torch.device) -> Callable[[], float]:
    def block() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        backend.synchronize(device)
        return time.perf_counter() - start
    return block


def canonical_step(canonical: Canonical, module: nn.Module, spec: ModelSpec, case: Case,
                   optimizer_name: str, batch: int, device: torch.device,
                   memory_format: torch.memory_format) -> Step:
    """One bare training step of the canonical `module` on random data drawn on `device`."""
    module = module.to(device=device, memory_format=memory_format).train()
    optimizer = make_optimizer(optimizer_name, module.parameters())
    generator = torch.Generator(device=device)
    generator.manual_seed(0)
    vocabulary = spec.input_vocabulary
    if vocabulary:
        x = torch.randint(0, vocabulary, (batch, *spec.input_shape), generator=generator, device=device)
    else:
        h, w, c = spec.input_shape
        x = torch.randn((batch, c, h, w), generator=generator, device=device).contiguous(memory_format=memory_format)
    y = torch.randint(0, spec.num_classes, (batch, *spec.target_shape), generator=generator, device=device)
    dtype = backend.AUTOCAST_DTYPES.get(case.precision)
    scaler = torch.amp.GradScaler(device.type) if case.precision is Precision.FP16 else None

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        context = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with context:
            loss = canonical.loss(module, x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    return step


def parity_case(model: str, device: str, precision: str, params: Mapping[str, ParamValue]) -> Case:
    """The parbench case parity times: single device, the model's recipe optimizer."""
    optimizer = "momentum" if model == "resnet50" else "adamw"
    return Case.make("train_step", "torch", device, "single", precision, 1,
                     {"model": model, "optimizer": optimizer, **params})


def run_parity(job: "Job", rounds: int, steps: int) -> ParityResult:
    """parbench's step of the job's case and the canonical loop at its sizes, `rounds` A B B A
    rounds of `steps`-step blocks after one warm-up block each. Raises ValueError where the
    canonical model cannot take the case's sizes."""
    case, workload = job.case, job.workload
    assert isinstance(workload, TrainStep)
    model = str(workload.p["model"])
    canonical, spec = CANONICAL[model], workload.model
    problem = canonical.sizes_problem(spec)
    if problem:
        raise ValueError(problem)
    runnable = job.runnable()
    runnable.setup()
    try:
        device = runnable.device
        module = canonical.build(importlib.import_module(canonical.package), spec)
        bare = canonical_step(canonical, module, spec, case, workload.optimizer, workload.global_batch, device,
                              runnable.model.memory_format)
        ours, theirs = _timed(runnable.step, steps, device), _timed(bare, steps, device)
        ours(), theirs()  # warm-up: allocators, cuDNN's autotuning, fused optimizer state
        interleaved = abba(ours, theirs, rounds)
    finally:
        runnable.teardown()
    tokens = workload.tokens_per_step()
    return ParityResult(model, case.id, canonical.what, f"{canonical.package} {_version(canonical.package)}",
                        "tokens/s" if tokens else "samples/s", tokens or workload.samples_per_step(), steps,
                        interleaved)
