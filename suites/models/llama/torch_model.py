"""The Llama stack (`LlamaBlock`) in torch: RMSNorm, rotary embeddings, grouped-query causal
attention, SwiGLU, built from the spec's canonical weights like every `TorchModel`.

Module paths are the canonical names' (``tok``, ``block{i}.attn.o``, ``block{i}.ffn.gate``,
``norm``, ``lm_head``; q, k and v are one fused layer ``block{i}.attn.qkv``,
`suites.frameworks.torch.qkv`), so tensor parallelism's plan (the embedding and the LM head replicated),
FSDP's units (the embedding, each block, the norm, the head) and the pipeline's stages (the
embedding with the first block; the final norm with the head) apply as they do to the built-in
transformer.
Under tensor parallelism the fused q, k, v layer is split by columns, whole kv groups to a rank,
so a rank holds heads / tp query heads and kv_heads / tp key/value heads, which keep their
grouping: local query head j reads local kv head j // (heads / kv_heads), as globally.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from suites.frameworks.torch.models import StageLayer, TorchModel, apply_layers, modules_in_order
from suites.frameworks.torch.qkv import FusedQkv, HeadLayout
from suites.models.llama.spec import LlamaBlock


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, the statistics in at least float32 (HF Llama's)."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = torch.promote_types(x.dtype, torch.float32)
        x32 = x.to(stats)
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.to(stats)).to(x.dtype)


def rotary_angles(seq: int, d_head: int, theta: float) -> torch.Tensor:
    """(seq, d_head / 2) angles position x theta^(-2i / d_head), in float64 (cast where used)."""
    inverse = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    return torch.outer(torch.arange(seq, dtype=torch.float64), inverse)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of (batch, heads, seq, d_head), rotate-half pairing (i with i + d_head/2)."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class _GroupedQueryAttention(nn.Module):
    def __init__(self, spec: LlamaBlock) -> None:
        super().__init__()
        d = spec.d_model
        self.qkv = FusedQkv(d, layout(spec), bias=False)
        self.o = nn.Linear(d, d, bias=False)
        angles = rotary_angles(spec.seq, spec.d_head, spec.rope_theta).repeat(1, 2)
        # Buffers follow the module to its device and dtype (`build`: float32, or float64 in the
        # reference); cast again to the compute dtype where used (autocast's bf16).
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv.heads(x)
        cos, sin = self.cos.to(q.dtype), self.sin.to(q.dtype)
        out = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v,
                                             is_causal=True, enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(*x.shape[:2], -1))


def layout(spec: LlamaBlock) -> HeadLayout:
    return HeadLayout(spec.heads, spec.kv_heads, spec.d_head)


class _LlamaBlock(nn.Module):
    def __init__(self, spec: LlamaBlock) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(spec.d_model, spec.rms_norm_eps)
        self.attn = _GroupedQueryAttention(spec)
        self.mlp_norm = RMSNorm(spec.d_model, spec.rms_norm_eps)
        self.ffn = nn.ModuleDict({"gate": nn.Linear(spec.d_model, spec.ffn, bias=False),
                                  "up": nn.Linear(spec.d_model, spec.ffn, bias=False),
                                  "down": nn.Linear(spec.ffn, spec.d_model, bias=False)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        h = self.mlp_norm(x)
        return x + self.ffn["down"](F.silu(self.ffn["gate"](h)) * self.ffn["up"](h))


class TorchLlamaBlock(TorchModel):
    """The token embedding (``tok``), `spec.layers` Llama blocks (``block0``, ...), the final
    RMSNorm (``norm``) and the untied LM head (``lm_head``): logits at every position."""

    def __init__(self, spec: LlamaBlock) -> None:
        super().__init__(spec)
        self.layers = spec.layers
        self.tok = nn.Embedding(spec.vocab, spec.d_model)
        for i in range(spec.layers):
            self.add_module(f"block{i}", _LlamaBlock(spec))
        self.norm = RMSNorm(spec.d_model, spec.rms_norm_eps)
        self.lm_head = nn.Linear(spec.d_model, spec.vocab, bias=False)

    @property
    def head_layout(self) -> HeadLayout:
        return layout(self.spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_layers(self.stage_layers(), self._modules, x)

    def stage_layers(self) -> list[StageLayer]:
        """The embedding with the first block, each further block, then the final norm with the
        LM head (`suites.strategies.stages.layer_names`: a pipeline's first stage embeds, its
        last projects onto the vocabulary)."""
        names = [("tok", "block0"), *((f"block{i}",) for i in range(1, self.layers)), ("norm", "lm_head")]
        return [StageLayer(group, modules_in_order(group)) for group in names]

