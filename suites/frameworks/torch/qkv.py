"""The fused QKV projection of the torch transformers: one matmul for q, k and v, as GPT-2's
`c_attn`, Megatron and torchtitan-style models compute them.

Its output features are grouped by key/value head: for each kv head g, the query features of the
heads that read it (heads / kv_heads of them), then g's key features, then g's value features
(Megatron's layout; with as many kv heads as heads, q_h k_h v_h per head). Contiguous slices of
the output are then whole groups, so tensor parallelism's column split of the one layer gives each
rank its heads' q, k and v together, as splitting three layers did.

The canonical parameters stay the three layers' (``attn.q|k|v.kernel``/``.bias``, shared with TF
and the checks); `fuse` and `unfuse` convert between them and the fused layer's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

#: A canonical q/k/v parameter: (prefix, which of q k v, leaf).
_QKV = re.compile(r"^(?P<prefix>.*attn)\.(?P<part>[qkv])\.(?P<leaf>kernel|bias)$")


@dataclass(frozen=True)
class HeadLayout:
    heads: int
    kv_heads: int
    d_head: int

    @property
    def group(self) -> int:
        """Query heads per kv head."""
        return self.heads // self.kv_heads

    @property
    def features(self) -> int:
        return self.kv_heads * (self.group + 2) * self.d_head


class FusedQkv(nn.Linear):
    """One Linear for q, k and v (see the module docstring for its output layout)."""

    def __init__(self, d_model: int, layout: HeadLayout, bias: bool) -> None:
        super().__init__(d_model, layout.features, bias=bias)
        self.layout = layout

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (batch, query heads here, seq, d_head), k and v (batch, kv heads here, seq, d_head):
        all heads, or under tensor parallelism the groups this rank's columns hold."""
        layout = self.layout
        batch, seq, _ = x.shape
        grouped = self(x).view(batch, seq, -1, (layout.group + 2) * layout.d_head)
        q, k, v = grouped.split([layout.group * layout.d_head, layout.d_head, layout.d_head], dim=-1)
        q = q.reshape(batch, seq, -1, layout.d_head)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _grouped(layout: HeadLayout, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The last axes of canonical q, k, v (kernels (in, out) or biases (out,)) interleaved by group."""
    width = layout.group * layout.d_head
    parts = []
    for g in range(layout.kv_heads):
        parts += [q[..., g * width:(g + 1) * width], k[..., g * layout.d_head:(g + 1) * layout.d_head],
                  v[..., g * layout.d_head:(g + 1) * layout.d_head]]
    return np.concatenate(parts, axis=-1)


def fuse(layout: HeadLayout, canonical: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Canonical parameters with every attention's q, k, v replaced by ``<prefix>.qkv.<leaf>``
    (canonical layout: kernels (in, fused out)); other entries as they are, in order."""
    fused: dict[str, np.ndarray] = {}
    for name, array in canonical.items():
        match = _QKV.match(name)
        if match is None:
            fused[name] = array
        elif match["part"] == "q":
            prefix, leaf = match["prefix"], match["leaf"]
            fused[f"{prefix}.qkv.{leaf}"] = _grouped(
                layout, *(canonical[f"{prefix}.{part}.{leaf}"] for part in "qkv"))
    return fused


def fused_names(names: list[str]) -> list[str]:
    """The names `fuse` gives parameters named `names`, in order."""
    out = []
    for name in names:
        match = _QKV.match(name)
        if match is None:
            out.append(name)
        elif match["part"] == "q":
            out.append(f"{match['prefix']}.qkv.{match['leaf']}")
    return out


def unfuse(layout: HeadLayout, fused: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """The inverse of `fuse`, in the canonical order `names`."""
    out = {}
    width, d_head = layout.group * layout.d_head, layout.d_head
    for name in names:
        match = _QKV.match(name)
        if match is None:
            out[name] = fused[name]
            continue
        grouped = fused[f"{match['prefix']}.qkv.{match['leaf']}"]
        blocks = np.split(grouped, layout.kv_heads, axis=-1)
        start, stop = {"q": (0, width), "k": (width, width + d_head), "v": (width + d_head, width + 2 * d_head)}[
            match["part"]]
        out[name] = np.concatenate([block[..., start:stop] for block in blocks], axis=-1)
    return out
