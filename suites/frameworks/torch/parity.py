"""Parity: parbench's torch training step timed beside the canonical implementation that
practitioners train, on the same device, in the same precision, at the same sizes, doing the
same work.

The canonical models: torchvision's ResNet (its `Bottleneck` stack, so also at the CPU's smaller
depths), and HF transformers' GPT2LMHeadModel and BertForMaskedLM built from a config of the
parbench model's sizes (no weights are downloaded). Each is trained in a bare loop
(`CanonicalStep`): zero_grad, forward under autocast (fp16 with a GradScaler), its own loss,
backward, optimizer step, on random data drawn on the device, in the memory layout parbench's
model runs. parbench's side is its own `TorchTrainStep`, set up as `parbench run` sets it up (its
precision flags and cuDNN autotuning then hold for both).

What a step computes, point by point, on both sides (`gpt2_config` and `bert_config` are the HF
configs; tests/test_parity.py checks each point on the built models and optimizers):

- dropout: none. parbench's models have none (nanoGPT pretrains GPT-2 so); HF's configs set every
  dropout probability to 0 (embeddings, residual, attention), where `F.dropout` with p = 0 returns
  its input and SDPA gets dropout_p 0.
- attention: `F.scaled_dot_product_attention`, no mask; causal (`is_causal`) for GPT-2, not for
  BERT; scale 1/sqrt(d_head). HF: `attn_implementation="sdpa"` (not its eager softmax(QK^T)V),
  no attention_mask passed, so it passes none to SDPA either.
- GELU: GPT-2's tanh approximation, as one fused `F.gelu(approximate="tanh")`: HF's
  `gelu_pytorch_tanh`, the same function as GPT-2's default `gelu_new` written as eight elementwise
  kernels (with `gelu_new` parbench read 1.52x HF on an H200 in bf16); BERT's exact erf GELU
  (HF's `gelu`), in the blocks and the MLM head.
- LayerNorm eps: 1e-5 (GPT-2), 1e-12 (BERT), every norm.
- embeddings: tied. GPT-2's logits are x @ wte^T (no bias); BERT's MLM decoder is the word
  embedding with its own bias. Positions learned, a (seq, d) table; parbench adds the table,
  HF looks it up with arange(seq) (a gather, and a scatter-add in backward: the same sums).
  BERT: every token in segment A (HF's default token_type_ids, zeros), the embeddings' LayerNorm,
  no pooler (BertForMaskedLM has none), the MLM head transform dense + GELU + LayerNorm.
- padding: none. parbench's batches hold no padding and pass no mask. BERT's config sets
  `pad_token_id=None`: with BERT's pad id 0 HF would check the first and last token of every row
  for padding on every forward (`warn_if_padding_and_no_attention_mask`: a device-to-host sync
  per step on a GPU, which practitioners avoid by passing an attention_mask that parbench's model
  has none of) and zero the pad row's embedding gradient.
- loss: softmax cross-entropy over the vocabulary at every position, in fp32 (autocast runs
  cross_entropy in fp32; HF GPT-2 upcasts its logits with `.float()` first: the same cast),
  the mean over the tokens, labels never -100 (uniform random token ids, targets as inputs).
  HF GPT-2 shifts its labels (`ForCausalLM`: position i predicts label i + 1, the last position's
  label is ignore_index -100), so its mean is over seq - 1 positions a row while the logits and
  log-softmax of all seq are computed, as parbench's, whose random targets are already the next
  tokens; BertForMaskedLM's is over every position, as parbench's (a masked LM's loss reads 15% of
  them: the work is the same).
- optimizer: the parbench case's (`make_optimizer`) on both: SGD momentum 0.9, weight decay 1e-4
  for ResNet; AdamW lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.1 for the transformers,
  fused on CUDA, torch's own default elsewhere; one parameter group, the decay on every parameter
  (HF Trainer's and nanoGPT's no-decay group of biases and norms changes the numbers, not the
  work).
- what is left, implementation, not work: HF's BertSelfAttention projects q, k and v with three
  Linear layers where parbench fuses them in one (`suites.frameworks.torch.qkv`, as GPT-2's
  `c_attn` and Megatron do): the same FLOPs, in three GEMMs each way instead of one, two more adds
  of the input gradient, and four more parameter tensors a layer for the optimizer. HF GPT-2's
  Conv1D keeps its weight (in, out) (`addmm(b, x, W)`) where nn.Linear keeps (out, in). And HF's
  forward runs more Python a step (its mask and output plumbing). On a CPU, large buffers (the
  tokens x vocabulary logits' log-softmax and gradient) come from glibc's mmap and page-fault on
  first touch, more often on one side than the other as their allocation histories differ.
  `op_profile` (`parbench parity --profile N`) shows the ops where the two sides' steps differ;
  docs/models.md has what it showed on the development VM.

Blocks of steps, each ended by a device sync, alternate A B B A (`suites.measure.interleaved`), with
the heap settled as `parbench run` times (`suites.measure.timing.settled_heap`); where `--steps` is not
given, a block holds as many steps as make it last `MIN_BLOCK_S` (a block of a few milliseconds
measures the clock and the scheduler more than the step). Each side's CPU time over its own blocks
is read, and judged as `parbench run` judges a case (`suites.records.contention.judge`): a ratio
where either side was contended is not to be trusted.

A canonical package that is installed but fails to load (torchvision built for another torch:
`import torchvision` raises RuntimeError "operator torchvision::nms does not exist") makes only
its own model "not compared"; transformers, which imports torchvision where it is installed, is
then loaded with the broken torchvision hidden (`load`).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from suites.cases.case import Case, ParamValue
from suites.cases.vocabulary import Precision
from suites.frameworks.torch import backend
from suites.frameworks.torch.training import make_optimizer
from suites.models.resnet.spec import ResNet50
from suites.models.transformer.spec import BertBase, Gpt2Small
from suites.measure.cpu_meter import CpuMeter
from suites.records.contention import Contention, judge, read_cpu
from suites.measure.interleaved import Interleaved, abba
from suites.measure.timing import settled_heap
from suites.workloads.training import ModelSpec, TrainStep

if TYPE_CHECKING:
    from suites.strategies.jobs import Job

Step = Callable[[], None]

#: Where `--steps` is not given, a timed block holds as many steps as make it last this long:
#: long against the clock's and the CPU counters' resolution (10 ms ticks) and against one
#: step's jitter, short enough that 5 rounds (20 blocks) of each model take about 10 s.
MIN_BLOCK_S = 0.5
#: The most steps a calibrated block may hold (a model so small that a step takes microseconds).
MAX_BLOCK_STEPS = 10_000
#: Steps of each side `op_profile` profiles (at most a block's).
PROFILED_STEPS = 10


class Unavailable(Exception):
    """The canonical implementation cannot be loaded here; the message says why and what to do."""


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
    #: Attributes of the package `build` uses (dotted): resolved when it is loaded, so a lazily
    #: imported class that fails to import is found before anything is timed.
    uses: tuple[str, ...] = ()
    #: Optional packages the package imports where they are installed: one installed that fails
    #: to load is hidden while this package loads, which then does without it.
    optional: tuple[str, ...] = ()


def _torchvision_resnet(torchvision: Any, spec: ResNet50) -> nn.Module:
    resnet = torchvision.models.resnet
    return resnet.ResNet(resnet.Bottleneck, list(spec.stage_blocks), num_classes=spec.classes)


def _resnet_sizes_problem(spec: ResNet50) -> str | None:
    if spec.width != 64:
        return f"torchvision's ResNet is 64 wide at its first stage; this case sets width = {spec.width}"
    return None


def gpt2_config(spec: Gpt2Small) -> dict[str, Any]:
    """GPT2Config's arguments for parbench's GPT-2 at the spec's sizes (the module docstring
    says why each)."""
    return dict(
        vocab_size=spec.vocab, n_positions=spec.seq, n_embd=spec.d_model, n_layer=spec.layers,
        n_head=spec.heads, n_inner=spec.ffn,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        activation_function="gelu_pytorch_tanh", layer_norm_epsilon=spec.layer_norm_eps,
        tie_word_embeddings=True, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False, add_cross_attention=False,
        # GPT-2's <|endoftext|> is the last token of its vocabulary (50256): the same at any size.
        bos_token_id=spec.vocab - 1, eos_token_id=spec.vocab - 1,
        attn_implementation="sdpa")


def bert_config(spec: BertBase) -> dict[str, Any]:
    """BertConfig's arguments for parbench's BERT at the spec's sizes (the module docstring
    says why each)."""
    return dict(
        vocab_size=spec.vocab, hidden_size=spec.d_model, num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads, intermediate_size=spec.ffn, max_position_embeddings=spec.seq,
        type_vocab_size=spec.token_types, hidden_act="gelu", layer_norm_eps=spec.layer_norm_eps,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=None,
        tie_word_embeddings=True, is_decoder=False, add_cross_attention=False,
        attn_implementation="sdpa")


def _hf_gpt2(transformers: Any, spec: Gpt2Small) -> nn.Module:
    module = transformers.GPT2LMHeadModel(transformers.GPT2Config(**gpt2_config(spec)))
    # Its class name names no loss, so HF would warn and fall back to this one.
    module.loss_type = "ForCausalLM"
    return module


def _hf_bert(transformers: Any, spec: BertBase) -> nn.Module:
    return transformers.BertForMaskedLM(transformers.BertConfig(**bert_config(spec)))


def _classifier_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(module(x), y)


def _hf_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return module(input_ids=x, labels=y).loss


#: parbench model -> its canonical implementation.
CANONICAL: dict[str, Canonical] = {
    "resnet50": Canonical("torchvision", "torchvision.models.resnet.ResNet(Bottleneck)", _torchvision_resnet,
                          _classifier_loss, "install the torchvision release built for this torch",
                          _resnet_sizes_problem, uses=("models.resnet.ResNet", "models.resnet.Bottleneck")),
    "gpt2_small": Canonical("transformers", "transformers.GPT2LMHeadModel", _hf_gpt2, _hf_loss,
                            "pip install transformers", uses=("GPT2Config", "GPT2LMHeadModel"),
                            optional=("torchvision",)),
    "bert_base": Canonical("transformers", "transformers.BertForMaskedLM", _hf_bert, _hf_loss,
                           "pip install transformers", uses=("BertConfig", "BertForMaskedLM"),
                           optional=("torchvision",)),
}


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def broken(package: str) -> str | None:
    """Why `package`, installed, fails to import (its error's first line); None where it imports
    or is not installed at all."""
    if package in sys.modules:  # imported already, or None there: hidden, as if not installed
        return None
    try:
        if importlib.util.find_spec(package) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        importlib.import_module(package)
    except Exception as error:  # not only ImportError: a torchvision of another torch raises RuntimeError
        return _first_line(error)
    return None


@contextlib.contextmanager
def hidden(packages: tuple[str, ...]) -> Iterator[None]:
    """`packages` look not installed while the block runs (None in sys.modules: importing one
    raises ImportError, `importlib.util.find_spec` finds nothing), as they were after it."""
    saved = {name: sys.modules[name] for name in packages if name in sys.modules}
    for name in packages:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in packages:
            if name in saved:
                sys.modules[name] = saved[name]
            else:
                sys.modules.pop(name, None)


@dataclass(frozen=True)
class Loaded:
    """A canonical package, imported, with the attributes its model uses resolved."""

    package: Any
    #: What was done to load it (an optional package hidden), or ''.
    note: str = ""
    #: The optional packages hidden while it loaded (and while its model is built).
    hidden: tuple[str, ...] = ()


def _resolve(package: Any, dotted: str) -> Any:
    value = package
    for name in dotted.split("."):
        value = getattr(value, name)
    return value


def load(canonical: Canonical) -> Loaded:
    """The canonical package, imported, with `canonical.uses` resolved (a lazy package imports
    the module of each then). Raises `Unavailable` with one line saying why and what to do: not
    installed, or installed and failing to load, with whatever error it raises (a torchvision
    built for another torch raises RuntimeError). An optional package it imports that is
    installed and broken (`canonical.optional`) is hidden while it loads, and `note` says so."""
    # Hidden first: the package may read (and cache) whether an optional one is there as it is imported.
    hide = {name: why for name in canonical.optional if (why := broken(name))}
    note = "; ".join(f"loaded with {name} hidden: it is installed but fails to load ({why})"
                     for name, why in hide.items())
    try:
        with hidden(tuple(hide)):
            package_error = broken(canonical.package)
            if package_error:
                raise Unavailable(f"{canonical.package} is installed but fails to load ({package_error}); "
                                  f"{canonical.install} to compare")
            package = importlib.import_module(canonical.package)
            for dotted in canonical.uses:
                _resolve(package, dotted)
    except Unavailable:
        raise
    except ImportError as error:
        if error.name != canonical.package:
            raise Unavailable(f"{canonical.package} is installed but fails to load ({_cause(error)}); "
                              f"{canonical.install} to compare") from error
        raise Unavailable(f"{canonical.package} is not importable here ({error}); "
                          f"{canonical.install} to compare") from error
    except Exception as error:  # not only ImportError: a module it imports may raise anything
        raise Unavailable(f"{canonical.package} is installed but fails to load ({_cause(error)}); "
                          f"{canonical.install} to compare") from error
    return Loaded(package, note, tuple(hide))


def _cause(error: BaseException) -> str:
    """The first line of `error`, and of the error that caused it where there is one (HF's lazy
    import wraps the real one in a ModuleNotFoundError that names only the class)."""
    cause = error.__cause__
    return _first_line(error) + (f", from {_first_line(cause)}" if cause is not None else "")


def unavailable_reason(model: str) -> str | None:
    """Why parity cannot run for `model` here (no canonical implementation; its package not
    importable, or failing to load), or None."""
    if model not in CANONICAL:
        return f"no canonical implementation is known for {model!r} (parity covers {', '.join(CANONICAL)})"
    try:
        load(CANONICAL[model])
    except Unavailable as error:
        return str(error)
    return None


@dataclass(frozen=True)
class ParityResult:
    """parbench's figure and the canonical one, from interleaved blocks, and what competed for
    each side's cores over its blocks."""

    model: str
    case_id: str
    canonical: str
    canonical_version: str
    unit: str
    #: Work (samples or tokens) per step.
    per_step: int
    steps_per_block: int
    interleaved: Interleaved
    #: Each side's contention over its own timed blocks (`suites.records.contention.judge`).
    parbench_contention: Contention | None = None
    canonical_contention: Contention | None = None
    #: How the canonical package was loaded, where that was out of the ordinary.
    note: str = ""
    #: Both sides' ops, where asked for (`op_profile`).
    profile: "OpProfile | None" = None

    def per_s(self, seconds: tuple[float, ...]) -> float:
        return self.per_step * self.steps_per_block / statistics.median(seconds)

    @property
    def parbench_per_s(self) -> float:
        return self.per_s(self.interleaved.a_seconds)

    @property
    def canonical_per_s(self) -> float:
        return self.per_s(self.interleaved.b_seconds)

    @property
    def contended(self) -> list[str]:
        """The sides whose blocks others competed with ('parbench', 'canonical'): where any is,
        the ratio is not to be trusted."""
        return [side for side, verdict in (("parbench", self.parbench_contention),
                                           ("canonical", self.canonical_contention))
                if verdict is not None and verdict.contended]


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


@dataclass(eq=False)
class CanonicalStep:
    """One bare training step of the canonical `module` on random data drawn on the device: what
    a practitioner's loop runs. Calling it runs one step."""

    canonical: Canonical
    module: nn.Module
    optimizer: torch.optim.Optimizer
    x: torch.Tensor
    y: torch.Tensor
    device: torch.device
    autocast_dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None

    def __call__(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        context = (torch.autocast(self.device.type, dtype=self.autocast_dtype) if self.autocast_dtype
                   else contextlib.nullcontext())
        with context:
            loss = self.canonical.loss(self.module, self.x, self.y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()


def canonical_step(canonical: Canonical, module: nn.Module, spec: ModelSpec, case: Case,
                   optimizer_name: str, batch: int, device: torch.device,
                   memory_format: torch.memory_format) -> CanonicalStep:
    """The canonical `module`'s training step, with the case's optimizer (`make_optimizer`, as
    parbench's), on random data drawn on `device`."""
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
    scaler = torch.amp.GradScaler(device.type) if case.precision is Precision.FP16 else None
    return CanonicalStep(canonical, module, optimizer, x, y, device,
                         backend.AUTOCAST_DTYPES.get(case.precision), scaler)


def parity_case(model: str, device: str, precision: str, params: Mapping[str, ParamValue]) -> Case:
    """The parbench case parity times: single device, the model's recipe optimizer."""
    optimizer = "momentum" if model == "resnet50" else "adamw"
    return Case.make("train_step", "torch", device, "single", precision, 1,
                     {"model": model, "optimizer": optimizer, **params})


def cpu_meter() -> CpuMeter | None:
    """This process's CPU meter (parity runs both sides in it); None where it cannot be built."""
    try:
        return CpuMeter(root=os.getpid())
    except Exception:  # the meter costs parity its contention figures, never its timing
        return None


def block_steps(seconds_a: float, seconds_b: float, steps: int, min_block_s: float = MIN_BLOCK_S) -> int:
    """Steps a block of each side holds so that the faster side's block lasts `min_block_s`,
    from one block of `steps` steps of each taking `seconds_a` and `seconds_b`; at least
    `steps`, at most MAX_BLOCK_STEPS. Both sides time blocks of the same count."""
    fastest = min(seconds_a, seconds_b) / steps
    if fastest <= 0:
        return MAX_BLOCK_STEPS
    return max(steps, min(MAX_BLOCK_STEPS, math.ceil(min_block_s / fastest)))


@dataclass(frozen=True)
class BuiltPair:
    """Both sides of one parity, set up and warmed up: parbench's runnable and the canonical step."""

    runnable: Any
    canonical: CanonicalStep
    loaded: Loaded


def build_pair(job: "Job") -> BuiltPair:
    """parbench's runnable of the job's case, set up, and the canonical step at its sizes.
    Raises ValueError where the canonical model cannot take the case's sizes and `Unavailable`
    where its package cannot be loaded. The caller tears the runnable down."""
    workload = job.workload
    assert isinstance(workload, TrainStep)
    model = str(workload.p["model"])
    canonical, spec = CANONICAL[model], workload.model
    problem = canonical.sizes_problem(spec)
    if problem:
        raise ValueError(problem)
    loaded = load(canonical)
    runnable = job.runnable()
    runnable.setup()
    try:
        with hidden(loaded.hidden):
            module = canonical.build(loaded.package, spec)
        bare = canonical_step(canonical, module, spec, job.case, workload.optimizer, workload.global_batch,
                              runnable.device, runnable.model.memory_format)
    except BaseException:
        runnable.teardown()
        raise
    return BuiltPair(runnable, bare, loaded)


def run_parity(job: "Job", rounds: int, steps: int | None = None, *, least_steps: int = 1,
               min_block_s: float = MIN_BLOCK_S, meter: CpuMeter | None = None,
               profile: bool = False) -> ParityResult:
    """parbench's step of the job's case and the canonical loop at its sizes, `rounds` A B B A
    rounds of blocks after one warm-up block each. A block holds `steps` steps, or where None as
    many (at least `least_steps`) as make the faster side's block last `min_block_s`
    (`block_steps`, from one more block of `least_steps` each). `meter` (default `cpu_meter()`)
    reads each side's CPU time over its blocks. Raises ValueError where the canonical model
    cannot take the case's sizes, `Unavailable` where its package cannot load. `profile`: also
    profile a few steps of each side after the timing (`op_profile`), kept in the result."""
    case, workload = job.case, job.workload
    assert isinstance(workload, TrainStep)
    model = str(workload.p["model"])
    canonical = CANONICAL[model]
    pair = build_pair(job)
    runnable, bare = pair.runnable, pair.canonical
    meter = meter if meter is not None else cpu_meter()
    ops: OpProfile | None = None
    try:
        device = runnable.device
        first = steps or least_steps
        ours, theirs = _timed(runnable.step, first, device), _timed(bare, first, device)
        # As `parbench run` times a case: what imports and setup left (HF's modules among them) is
        # frozen, so the collector's full passes cost both sides alike, not whichever meets one.
        with settled_heap():
            ours(), theirs()  # warm-up: allocators, cuDNN's autotuning, fused optimizer state
            if steps is None:
                steps = block_steps(ours(), theirs(), first, min_block_s)
                ours, theirs = _timed(runnable.step, steps, device), _timed(bare, steps, device)
            before = read_cpu()
            interleaved = abba(ours, theirs, rounds, meter)
            after = read_cpu()
        if profile:
            ops = op_profile(runnable.step, bare, min(steps, PROFILED_STEPS), device)
    finally:
        runnable.teardown()
    cores = os.cpu_count() or 1
    busy = device.type == "cpu"  # a CPU step keeps its threads busy; a GPU step's host thread waits
    threads = torch.get_num_threads() if busy else None

    def verdict(usage: Any) -> Contention:
        return judge(before, after, cores, replace(usage, threads=threads) if usage is not None else None, busy)

    tokens = workload.tokens_per_step()
    return ParityResult(model, case.id, canonical.what, f"{canonical.package} {_version(canonical.package)}",
                        "tokens/s" if tokens else "samples/s", tokens or workload.samples_per_step(), steps,
                        interleaved, verdict(interleaved.a_cpu), verdict(interleaved.b_cpu), pair.loaded.note, ops)


# --- what differs, op by op ----------------------------------------------------------------------

@dataclass(frozen=True)
class OpTime:
    """One op of a profiled step: its self time (ms a step: CPU on a CPU, device on a GPU) and
    calls a step."""

    name: str
    ms: float
    calls: float


@dataclass(frozen=True)
class OpProfile:
    """Both sides' ops, per step, and what was profiled."""

    parbench: dict[str, OpTime]
    canonical: dict[str, OpTime]
    steps: int
    #: 'self CPU' or 'self device'.
    clock: str = "self CPU"
    totals: dict[str, float] = field(default_factory=dict)

    def rows(self, top: int) -> list[tuple[str, OpTime | None, OpTime | None]]:
        """The ops either side spends most on (the top `top` of each, their union), ordered by
        how much the two sides differ on them, most first."""
        names = set(sorted(self.parbench, key=lambda n: -self.parbench[n].ms)[:top])
        names |= set(sorted(self.canonical, key=lambda n: -self.canonical[n].ms)[:top])

        def gap(name: str) -> float:
            ours, theirs = self.parbench.get(name), self.canonical.get(name)
            return abs((ours.ms if ours else 0.0) - (theirs.ms if theirs else 0.0))
        return [(name, self.parbench.get(name), self.canonical.get(name))
                for name in sorted(names, key=gap, reverse=True)]


def _profile_one(step: Step, steps: int, device: torch.device) -> tuple[dict[str, OpTime], float]:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    step()  # the profiler's own first-call costs fall outside
    backend.synchronize(device)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        backend.synchronize(device)
    on_device = device.type == "cuda"
    ops: dict[str, OpTime] = {}
    for event in prof.key_averages():
        us = (getattr(event, "self_device_time_total", 0.0) if on_device else event.self_cpu_time_total)
        if us or event.count:
            ops[event.key] = OpTime(event.key, us / 1000.0 / steps, event.count / steps)
    return ops, sum(op.ms for op in ops.values())


def op_profile(ours: Step, theirs: Step, steps: int, device: torch.device) -> OpProfile:
    """torch.profiler's key_averages of `steps` steps of each side, per step: each op's self time
    and calls. One profiled block per side, after the timing: the profiler slows what it sees,
    so its times say where each side spends, not how fast it is."""
    parbench, ours_total = _profile_one(ours, steps, device)
    canonical, theirs_total = _profile_one(theirs, steps, device)
    return OpProfile(parbench, canonical, steps, "self device" if device.type == "cuda" else "self CPU",
                     {"parbench": ours_total, "canonical": theirs_total})
