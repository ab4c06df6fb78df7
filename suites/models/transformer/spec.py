"""The transformers built from one encoder/decoder block, framework-neutral: the built-in
`transformer` (`TransformerBlock`) and the standard language models that set its choices,
BERT-base and GPT-2 small (`LanguageModel` is what they share as language models, with the
Llama stack of `suites.models.llama`). One torch module and one TF forward build them all.

Framework-neutral specs, as every `suites.workloads.model_spec.ModelSpec`: parameter names and
shapes in the canonical layout, seeded weights, forward FLOPs. Sequence length, width, heads,
layers and the vocabulary are `train_step` size parameters, so a CPU case runs a short, shallow
version of the same architecture (and may use a smaller vocabulary).

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
from typing import ClassVar, Mapping

import numpy as np

from suites.cases.vocabulary import Framework
from suites.workloads.model_spec import NUM_CLASSES, ModelSpec, size

#: Bytes of an fp32 element, and of an int64 token id (a sample's inputs and targets).
FP32_BYTES, TOKEN_ID_BYTES = 4, 8


def norm_bytes(compute_bytes: int, autocast: bool) -> int:
    """Bytes per element of what a norm saves and of the residual stream: fp32 under torch autocast
    (layer_norm and the loss are on its fp32 list, and the fp32 embeddings start the stream),
    the compute dtype where a strategy casts the parameters itself (FSDP's MixedPrecisionPolicy)."""
    return FP32_BYTES if autocast else compute_bytes


@dataclass(frozen=True)
class TransformerBlock(ModelSpec):
    """`layers` identical pre-norm encoder blocks on (seq, d) inputs, each
    x + MHA(LN(x)); x + FFN(LN(x)) with FFN = dense(d->ffn)+gelu(tanh approx)+dense(ffn->d);
    then mean over seq, dense(d->10). LayerNorm eps 1e-5; attention softmax(QK^T/sqrt(d_head))V,
    no mask, no dropout. Block i's parameters are named ``block{i}.<ln1|attn|ln2|ffn>...``.

    The class variables below are the architecture's choices; the standard transformers
    (below: BERT, GPT-2) are subclasses that set them, so one torch
    module and one TF forward build them all."""

    name: ClassVar[str] = "transformer"
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "torch_model:TorchTransformerBlock",
        Framework.TF: "tf_model:transformer_layers",
    }
    #: Each position attends to itself and earlier positions only (a decoder's mask).
    causal: ClassVar[bool] = False
    #: Pre-norm (x + f(LN(x))) or post-norm (LN(x + f(x)), BERT's).
    norm_first: ClassVar[bool] = True
    #: Biases on the q, k, v projections (BERT, GPT-2) or none.
    qkv_bias: ClassVar[bool] = False
    #: A learned positional embedding (seq, d) added to the inputs, named ``pos.embedding``.
    learned_positions: ClassVar[bool] = False
    #: A LayerNorm (``input_norm``) of the inputs (plus positions) before the first block (BERT's).
    input_norm: ClassVar[bool] = False
    #: A LayerNorm (``final_norm``) after the last block (GPT-2's ln_f).
    final_norm: ClassVar[bool] = False
    #: GELU's tanh approximation (GPT-2) or the exact erf form (BERT).
    gelu_tanh: ClassVar[bool] = True
    layer_norm_eps: ClassVar[float] = 1e-5
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {"layers": 2, "seq": 32, "d_model": 128, "heads": 8,
                                                          "ffn": 256}

    seq: int = size(64, "sequence length")
    d_model: int = size(128, "model width")
    heads: int = size(4, "attention heads (must divide d_model)")
    ffn: int = size(512, "feed-forward width")
    layers: int = size(1, "stacked encoder blocks")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.seq, self.d_model)

    def size_problems(self) -> list[str]:
        if self.d_model % self.heads:
            return [f"heads = {self.heads} does not divide d_model = {self.d_model}"]
        return []

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        d, f = self.d_model, self.ffn
        shapes: dict[str, tuple[int, ...]] = {}
        if self.learned_positions:
            shapes["pos.embedding"] = (self.seq, d)
        if self.input_norm:
            shapes.update({"input_norm.gamma": (d,), "input_norm.beta": (d,)})
        qkv = [(f"attn.{p}.{leaf}", shape) for p in "qkv"
               for leaf, shape in (("kernel", (d, d)), ("bias", (d,)))[:2 if self.qkv_bias else 1]]
        for i in range(self.layers):
            shapes.update({f"block{i}.{name}": shape for name, shape in (
                ("ln1.gamma", (d,)), ("ln1.beta", (d,)), *qkv,
                ("attn.o.kernel", (d, d)), ("attn.o.bias", (d,)),
                ("ln2.gamma", (d,)), ("ln2.beta", (d,)),
                ("ffn.in.kernel", (d, f)), ("ffn.in.bias", (f,)),
                ("ffn.out.kernel", (f, d)), ("ffn.out.bias", (d,)))})
        if self.final_norm:
            shapes.update({"final_norm.gamma": (d,), "final_norm.beta": (d,)})
        shapes["head.kernel"] = (d, NUM_CLASSES)
        shapes["head.bias"] = (NUM_CLASSES,)
        return shapes

    def forward_flops_per_sample(self) -> float:
        s, d, f = self.seq, self.d_model, self.ffn
        projections = 4 * 2 * s * d * d
        attention = 2 * 2 * s * s * d  # QK^T and AV over all heads (a causal mask saves none here)
        feed_forward = 2 * 2 * s * d * f
        return float(self.layers * (projections + attention + feed_forward) + 2 * d * NUM_CLASSES)

    @property
    def tokens_per_sample(self) -> int:
        return self.seq

    def layer_activation_bytes_per_token(self, compute_bytes: int, autocast: bool) -> int:
        """Bytes one block keeps per token for the backward pass in torch, from its shapes: the
        inputs of its two LayerNorms (`norm_bytes`); in the compute dtype the inputs of the q/k/v
        projection, of the output projection (the attention's output) and of the feed-forward, q, k
        and v (flash attention keeps no scores), the feed-forward's hidden layer and its GELU; and
        attention's fp32 log-sum-exp per head. In fp32: 32 d + 8 ffn; in 16 bits under autocast
        20 d + 4 ffn (Korthikanti et al. 2022 count 34 d at ffn = 4 d with dropout's masks and no
        fp32 norms)."""
        d = self.d_model
        return (2 * norm_bytes(compute_bytes, autocast) * d + compute_bytes * (6 * d + 2 * self.ffn)
                + FP32_BYTES * self.heads)

    def activation_bytes_per_sample(self, compute_bytes: int, autocast: bool) -> float:
        """Bytes one sample holds at a torch training step's peak (`suites.predict.memory`): every
        block's (`layer_activation_bytes_per_token`) and the fp32 input sequence."""
        per_token = self.layers * self.layer_activation_bytes_per_token(compute_bytes, autocast)
        return float(self.seq * (per_token + FP32_BYTES * self.d_model))


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

    def logit_bytes_per_token(self, compute_bytes: int, autocast: bool) -> int:
        """Bytes per token the loss holds at its peak: the logits in the compute dtype, under
        autocast their fp32 copy (cross-entropy is on its fp32 list), and the log-probabilities the
        backward keeps (`norm_bytes`); plus the int64 token id and target."""
        cast = FP32_BYTES if autocast and compute_bytes < FP32_BYTES else 0
        return self.vocab * (compute_bytes + cast + norm_bytes(compute_bytes, autocast)) + 2 * TOKEN_ID_BYTES


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
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {**TransformerBlock.rehearsal_sizes, "vocab": 512}

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

    def activation_bytes_per_sample(self, compute_bytes: int, autocast: bool) -> float:
        """The blocks', the input LayerNorm's input, the MLM head's (its dense input, GELU input,
        LayerNorm input and decoder input) and the loss's (`logit_bytes_per_token`), per token."""
        wide = norm_bytes(compute_bytes, autocast)
        head = (3 * compute_bytes + wide) * self.d_model
        per_token = (self.layers * self.layer_activation_bytes_per_token(compute_bytes, autocast)
                     + wide * self.d_model + head + self.logit_bytes_per_token(compute_bytes, autocast))
        return float(self.seq * per_token)


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
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {**TransformerBlock.rehearsal_sizes, "vocab": 512}

    seq: int = size(1024, "sequence length")
    vocab: int = size(50257, "vocabulary (token ids and the LM head's logits)")

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"tok.embedding": (self.vocab, self.d_model), **self.block_parameter_shapes()}

    def forward_flops_per_sample(self) -> float:
        return self.block_flops_per_sample() + self.head_flops_per_sample()

    def activation_bytes_per_sample(self, compute_bytes: int, autocast: bool) -> float:
        """The blocks', the final LayerNorm's input, the head's input and the loss's
        (`logit_bytes_per_token`), per token."""
        head = (norm_bytes(compute_bytes, autocast) + compute_bytes) * self.d_model
        per_token = (self.layers * self.layer_activation_bytes_per_token(compute_bytes, autocast) + head
                     + self.logit_bytes_per_token(compute_bytes, autocast))
        return float(self.seq * per_token)
