"""The standard transformers people compare hardware by: BERT-base, GPT-2 small, a Llama-style stack.

Framework-neutral specs, as `suites.workloads.training`'s: parameter names and shapes in the
canonical layout, seeded weights, forward FLOPs. Sequence length, width, heads and layers are
`train_step` size parameters, so a CPU case runs a short, shallow version of the same architecture.

What is built, and what is not (the same in torch and TF):
- The input of a sample is its sequence of token embeddings, (seq, d_model) floats drawn at
  random: the vocabulary's lookup is a gather (no FLOPs) and is not built, nor is a language
  model's vocabulary projection. The output is a 10-class head on the mean over the sequence,
  as for the built-in `transformer`, so the loss, data and checks are those of every model.
  `vocabulary_parameters` counts the tables left out, so the published sizes can be stated:
  BERT-base 85.1M in its blocks + 0.39M positions + 23.4M vocabulary (= HF BertModel's 109.5M
  with its 0.59M pooler), GPT-2 small 85.1M + 0.79M positions + 38.6M tied vocabulary = 124.4M,
  the Llama stack at its defaults (Llama 3 8B's block shape, 32 layers) 6.98B + 1.05B = 8.03B.
- FLOPs (`forward_flops_per_sample`, x3 for a training step) count the matmuls: 2 N per token
  for the N weights of the dense layers, plus attention's QK^T and AV, 4 seq d per token and
  layer, with no saving for a causal mask: the training step is 6 N + 12 layers seq d per token,
  PaLM's accounting of model FLOPs for MFU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from suites.workloads.training import NUM_CLASSES, ModelSpec, TransformerBlock, size


@dataclass(frozen=True)
class BaseSizedTransformer(TransformerBlock):
    """The size BERT-base and GPT-2 small share: 12 blocks of width 768, 12 heads, feed-forward 3072."""

    d_model: int = size(768, "model width")
    heads: int = size(12, "attention heads (must divide d_model)")
    ffn: int = size(3072, "feed-forward width")
    layers: int = size(12, "stacked blocks")


@dataclass(frozen=True)
class BertBase(BaseSizedTransformer):
    """BERT-base's encoder (Devlin et al. 2018; HF BertModel): learned positions, the
    embeddings' LayerNorm, 12 post-norm blocks x = LN(x + MHA(x)); x = LN(x + FFN(x)), biases
    on every projection, exact (erf) GELU, LayerNorm eps 1e-12, no mask."""

    name: ClassVar[str] = "bert_base"
    norm_first: ClassVar[bool] = False
    qkv_bias: ClassVar[bool] = True
    learned_positions: ClassVar[bool] = True
    input_norm: ClassVar[bool] = True
    gelu_tanh: ClassVar[bool] = False
    layer_norm_eps: ClassVar[float] = 1e-12
    #: WordPiece vocabulary and token types (segment A/B) of bert-base-uncased.
    vocabulary: ClassVar[int] = 30522
    token_types: ClassVar[int] = 2

    seq: int = size(512, "sequence length")

    def vocabulary_parameters(self) -> int:
        return (self.vocabulary + self.token_types) * self.d_model


@dataclass(frozen=True)
class Gpt2Small(BaseSizedTransformer):
    """GPT-2 small's decoder (Radford et al. 2019; HF GPT2Model): learned positions, 12 pre-norm
    blocks with causal self-attention, biases on every projection, tanh-approximated GELU, a
    final LayerNorm (ln_f), LayerNorm eps 1e-5."""

    name: ClassVar[str] = "gpt2_small"
    causal: ClassVar[bool] = True
    qkv_bias: ClassVar[bool] = True
    learned_positions: ClassVar[bool] = True
    final_norm: ClassVar[bool] = True
    #: The BPE vocabulary; its embedding is tied to the LM head, so it counts once.
    vocabulary: ClassVar[int] = 50257

    seq: int = size(1024, "sequence length")

    def vocabulary_parameters(self) -> int:
        return self.vocabulary * self.d_model


@dataclass(frozen=True)
class LlamaBlock(ModelSpec):
    """A stack of Llama blocks (Touvron et al. 2023; HF LlamaModel), defaults Llama 3 8B's shape:
    x + attn(RMSNorm(x)); x + SwiGLU(RMSNorm(x)), then RMSNorm, the mean over the sequence and
    dense(d -> 10). Attention is causal and grouped-query: `heads` query heads share `kv_heads`
    key/value heads (query head j reads kv head j // (heads / kv_heads)), with rotary position
    embeddings on q and k (base `rope_theta`, the rotate-half pairing of HF's Llama: dimension i
    pairs with i + d_head/2). SwiGLU = down(silu(gate x) * up x). No biases; RMSNorm eps 1e-5.
    Block i's parameters are ``block{i}.<attn_norm|attn.q|k|v|o|mlp_norm|ffn.gate|up|down>``."""

    name: ClassVar[str] = "llama_block"
    rope_theta: ClassVar[float] = 500000.0
    rms_norm_eps: ClassVar[float] = 1e-5
    #: Llama 3's vocabulary; its embedding and LM head are untied (two tables).
    vocabulary: ClassVar[int] = 128256

    seq: int = size(2048, "sequence length")
    d_model: int = size(4096, "model width")
    heads: int = size(32, "attention heads (must divide d_model)")
    kv_heads: int = size(8, "key/value heads (must divide heads)")
    ffn: int = size(14336, "feed-forward width")
    layers: int = size(32, "stacked blocks")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.seq, self.d_model)

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    @property
    def tokens_per_sample(self) -> int:
        return self.seq

    def size_problems(self) -> list[str]:
        problems = []
        if self.d_model % self.heads:
            problems.append(f"heads = {self.heads} does not divide d_model = {self.d_model}")
        elif self.d_head % 2:
            problems.append(f"rotary embeddings rotate pairs: d_head = {self.d_head} must be even")
        if self.heads % self.kv_heads:
            problems.append(f"kv_heads = {self.kv_heads} does not divide heads = {self.heads}")
        return problems

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        d, f, kv = self.d_model, self.ffn, self.kv_heads * self.d_head
        shapes: dict[str, tuple[int, ...]] = {}
        for i in range(self.layers):
            shapes.update({f"block{i}.{name}": shape for name, shape in (
                ("attn_norm.gamma", (d,)),
                ("attn.q.kernel", (d, d)), ("attn.k.kernel", (d, kv)), ("attn.v.kernel", (d, kv)),
                ("attn.o.kernel", (d, d)),
                ("mlp_norm.gamma", (d,)),
                ("ffn.gate.kernel", (d, f)), ("ffn.up.kernel", (d, f)), ("ffn.down.kernel", (f, d)))})
        shapes["norm.gamma"] = (d,)
        shapes["head.kernel"] = (d, NUM_CLASSES)
        shapes["head.bias"] = (NUM_CLASSES,)
        return shapes

    def forward_flops_per_sample(self) -> float:
        s, d, f, kv = self.seq, self.d_model, self.ffn, self.kv_heads * self.d_head
        projections = 2 * s * (2 * d * d + 2 * d * kv)
        attention = 2 * 2 * s * s * d  # QK^T and AV over the query heads
        feed_forward = 3 * 2 * s * d * f
        return float(self.layers * (projections + attention + feed_forward) + 2 * d * NUM_CLASSES)

    def vocabulary_parameters(self) -> int:
        return 2 * self.vocabulary * self.d_model


#: The specs this module adds to the built-in models.
STANDARD_TRANSFORMERS: tuple[type[ModelSpec], ...] = (BertBase, Gpt2Small, LlamaBlock)
