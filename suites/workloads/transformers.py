"""The standard transformers people compare hardware by: BERT-base, GPT-2 small, a Llama-style stack.

Framework-neutral specs, as `suites.workloads.training`'s: parameter names and shapes in the
canonical layout, seeded weights, forward FLOPs. Sequence length, width, heads, layers and the
vocabulary are `train_step` size parameters, so a CPU case runs a short, shallow version of the
same architecture (and may use a smaller vocabulary).

They are language models, built whole, as their practitioners train them (the same in torch and
TF): a sample is a sequence of integer token ids; the token embedding (``tok.embedding``, plus
BERT's segment and both models' learned positions) feeds the blocks, and the vocabulary projection
gives logits for every position, with softmax cross-entropy against a target token per position,
the mean over every token of the batch. GPT-2's head is its token embedding (tied: one table);
BERT's is its masked-LM head (``mlm``: dense + GELU + LayerNorm, then the decoder tied to the
embedding with its own bias ``mlm.bias``), over every position as HF's BertForMaskedLM computes
it (a masked LM's loss reads 15% of them; the work is the same); the Llama stack's head
(``lm_head``) is untied. Token ids and targets are drawn uniformly from the vocabulary.
Parameter counts at the default sizes are the published ones: BERT-base with its MLM head
109,514,298 (HF BertForMaskedLM), GPT-2 small 124,439,808, Llama 3 8B 8,030,261,248.

FLOPs (`forward_flops_per_sample`, x3 for a training step) count the matmuls: 2 N per token for
the N weights of the dense layers and the vocabulary projection (a tied table counts once, as
the head: the embedding's lookup is a gather, no FLOPs), plus attention's QK^T and AV, 4 seq d
per token and layer, with no saving for a causal mask: the training step is 6 N + 12 layers seq d
per token, PaLM's (and nanoGPT's) model FLOPs for MFU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from suites.workloads.model_specs import ModelSpec, TransformerBlock, size


@dataclass(frozen=True)
class LanguageModel:
    """What the standard transformers share as language models (mixed in before their
    architecture's spec): token ids in, logits over the `vocab` out, a target token per position.
    Each subclass declares the fields `seq`, `d_model` and `vocab` with its own defaults."""

    #: The token embedding is also the vocabulary projection (GPT-2; BERT's MLM decoder): one
    #: table used at both ends of the model.
    tied_embedding: ClassVar[bool] = True

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.seq,)

    @property
    def input_vocabulary(self) -> int:
        return self.vocab

    @property
    def loss(self) -> str:
        return "token_cross_entropy"

    @property
    def num_classes(self) -> int:
        return self.vocab

    @property
    def target_shape(self) -> tuple[int, ...]:
        return (self.seq,)

    @property
    def tokens_per_sample(self) -> int:
        return self.seq

    def make_batch(self, batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and target tokens, int64, uniform over the vocabulary."""
        rng = np.random.default_rng(seed)
        shape = (batch, self.seq)
        return (rng.integers(0, self.vocab, size=shape, dtype=np.int64),
                rng.integers(0, self.vocab, size=shape, dtype=np.int64))

    def head_flops_per_sample(self) -> float:
        """The vocabulary projection's matmul at every position."""
        return float(2 * self.seq * self.d_model * self.vocab)


@dataclass(frozen=True)
class BaseSizedTransformer(TransformerBlock):
    """The size BERT-base and GPT-2 small share: 12 blocks of width 768, 12 heads, feed-forward 3072."""

    d_model: int = size(768, "model width")
    heads: int = size(12, "attention heads (must divide d_model)")
    ffn: int = size(3072, "feed-forward width")
    layers: int = size(12, "stacked blocks")

    def block_parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """The transformer's parameters without its 10-class head."""
        return {name: shape for name, shape in super().parameter_shapes().items() if not name.startswith("head.")}

    def block_flops_per_sample(self) -> float:
        """The blocks' forward FLOPs (the transformer's, without its 10-class head)."""
        return super().forward_flops_per_sample() - 2 * self.d_model * 10


@dataclass(frozen=True)
class BertBase(LanguageModel, BaseSizedTransformer):
    """BERT-base with its masked-LM head (Devlin et al. 2018; HF BertForMaskedLM): token, segment
    (every token in segment A, HF's default token_type_ids) and learned position embeddings, the
    embeddings' LayerNorm, 12 post-norm blocks x = LN(x + MHA(x)); x = LN(x + FFN(x)), biases on
    every projection, exact (erf) GELU, LayerNorm eps 1e-12, no mask; the MLM head
    LN(GELU(dense(x))) @ tok.embedding^T + mlm.bias."""

    name: ClassVar[str] = "bert_base"
    norm_first: ClassVar[bool] = False
    qkv_bias: ClassVar[bool] = True
    learned_positions: ClassVar[bool] = True
    input_norm: ClassVar[bool] = True
    gelu_tanh: ClassVar[bool] = False
    layer_norm_eps: ClassVar[float] = 1e-12
    #: Token types (segments A/B) of bert-base-uncased.
    token_types: ClassVar[int] = 2

    seq: int = size(512, "sequence length")
    vocab: int = size(30522, "vocabulary (token ids and the LM head's logits)")

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.d_model
        return {"tok.embedding": (self.vocab, d), "segment.embedding": (self.token_types, d),
                **self.block_parameter_shapes(),
                "mlm.dense.kernel": (d, d), "mlm.dense.bias": (d,), "mlm.norm.gamma": (d,), "mlm.norm.beta": (d,),
                "mlm.bias": (self.vocab,)}

    def forward_flops_per_sample(self) -> float:
        return self.block_flops_per_sample() + 2 * self.seq * self.d_model ** 2 + self.head_flops_per_sample()


@dataclass(frozen=True)
class Gpt2Small(LanguageModel, BaseSizedTransformer):
    """GPT-2 small with its LM head (Radford et al. 2019; HF GPT2LMHeadModel): token and learned
    position embeddings, 12 pre-norm blocks with causal self-attention, biases on every
    projection, tanh-approximated GELU, a final LayerNorm (ln_f), LayerNorm eps 1e-5; logits
    ln_f(x) @ tok.embedding^T (tied, no bias). `vocab` 50257 (GPT-2's BPE); nanoGPT pads it to
    50304, a multiple of 64, for faster matmuls: set vocab = 50304 to time that."""

    name: ClassVar[str] = "gpt2_small"
    causal: ClassVar[bool] = True
    qkv_bias: ClassVar[bool] = True
    learned_positions: ClassVar[bool] = True
    final_norm: ClassVar[bool] = True

    seq: int = size(1024, "sequence length")
    vocab: int = size(50257, "vocabulary (token ids and the LM head's logits)")

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"tok.embedding": (self.vocab, self.d_model), **self.block_parameter_shapes()}

    def forward_flops_per_sample(self) -> float:
        return self.block_flops_per_sample() + self.head_flops_per_sample()


@dataclass(frozen=True)
class LlamaBlock(LanguageModel, ModelSpec):
    """A Llama language model (Touvron et al. 2023; HF LlamaForCausalLM), defaults Llama 3 8B's
    shape (the standard suite stacks fewer layers): the token embedding, then per block
    x + attn(RMSNorm(x)); x + SwiGLU(RMSNorm(x)), then RMSNorm and the untied LM head
    (``lm_head``, d -> vocab). Attention is causal and grouped-query: `heads` query heads share
    `kv_heads` key/value heads (query head j reads kv head j // (heads / kv_heads)), with rotary
    position embeddings on q and k (base `rope_theta`, the rotate-half pairing of HF's Llama:
    dimension i pairs with i + d_head/2). SwiGLU = down(silu(gate x) * up x). No biases; RMSNorm
    eps 1e-5. Block i's parameters are ``block{i}.<attn_norm|attn.q|k|v|o|mlp_norm|ffn.gate|up|down>``."""

    name: ClassVar[str] = "llama_block"
    rope_theta: ClassVar[float] = 500000.0
    rms_norm_eps: ClassVar[float] = 1e-5
    tied_embedding: ClassVar[bool] = False

    seq: int = size(2048, "sequence length")
    d_model: int = size(4096, "model width")
    heads: int = size(32, "attention heads (must divide d_model)")
    kv_heads: int = size(8, "key/value heads (must divide heads)")
    ffn: int = size(14336, "feed-forward width")
    layers: int = size(32, "stacked blocks")
    vocab: int = size(128256, "vocabulary (token ids and the LM head's logits)")

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

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
        shapes: dict[str, tuple[int, ...]] = {"tok.embedding": (self.vocab, d)}
        for i in range(self.layers):
            shapes.update({f"block{i}.{name}": shape for name, shape in (
                ("attn_norm.gamma", (d,)),
                ("attn.q.kernel", (d, d)), ("attn.k.kernel", (d, kv)), ("attn.v.kernel", (d, kv)),
                ("attn.o.kernel", (d, d)),
                ("mlp_norm.gamma", (d,)),
                ("ffn.gate.kernel", (d, f)), ("ffn.up.kernel", (d, f)), ("ffn.down.kernel", (f, d)))})
        shapes["norm.gamma"] = (d,)
        shapes["lm_head.kernel"] = (d, self.vocab)
        return shapes

    def forward_flops_per_sample(self) -> float:
        s, d, f, kv = self.seq, self.d_model, self.ffn, self.kv_heads * self.d_head
        projections = 2 * s * (2 * d * d + 2 * d * kv)
        attention = 2 * 2 * s * s * d  # QK^T and AV over the query heads
        feed_forward = 3 * 2 * s * d * f
        return float(self.layers * (projections + attention + feed_forward)) + self.head_flops_per_sample()


#: The specs this module adds to the built-in models.
STANDARD_TRANSFORMERS: tuple[type[ModelSpec], ...] = (BertBase, Gpt2Small, LlamaBlock)
