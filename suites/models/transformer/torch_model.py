"""The transformers of `suites.models.transformer.spec` in torch: the built-in transformer, BERT
and GPT-2, one module whose spec's class variables choose the mask, the norm placement, biases,
positions, norms and head."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from suites.frameworks.torch.models import StageLayer, TorchModel, apply_layers, modules_in_order
from suites.frameworks.torch.qkv import FusedQkv, HeadLayout
from suites.models.transformer.spec import TransformerBlock
from suites.workloads.model_spec import NUM_CLASSES


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
