"""The Llama stack (`llama_block`), framework-neutral: a language model (see
`suites.models.transformer.spec`) of RMSNorm, rotary embeddings, grouped-query causal attention
and SwiGLU blocks, with an untied LM head. Parameter count at the default sizes: Llama 3 8B's,
8,030,261,248.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from suites.cases.vocabulary import Framework
from suites.models.transformer.spec import FP32_BYTES, LanguageModel
from suites.workloads.model_spec import ModelSpec, size

#: What one RMSNorm keeps per element: its fp32 input and normalised fp32 product (the statistics
#: in at least float32, whatever the compute dtype).
RMS_NORM_BYTES = 2 * FP32_BYTES


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
    implementations: ClassVar[Mapping[Framework, str]] = {
        Framework.TORCH: "torch_model:TorchLlamaBlock",
        Framework.TF: "tf_model:llama_layers",
    }
    rope_theta: ClassVar[float] = 500000.0
    rms_norm_eps: ClassVar[float] = 1e-5
    tied_embedding: ClassVar[bool] = False
    rehearsal_sizes: ClassVar[Mapping[str, int | str]] = {"layers": 2, "seq": 32, "d_model": 256, "heads": 16,
                                                          "kv_heads": 8, "ffn": 512, "vocab": 512}

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

    def activation_bytes_per_sample(self, compute_bytes: int, autocast: bool) -> float:
        """Bytes one sample holds at a torch training step's peak (`suites.predict.memory`), per
        token: per block two RMSNorms (`RMS_NORM_BYTES`), and in the compute dtype the projections'
        inputs (under autocast the gate and up projections each cast their own copy), the fused
        q/k/v output (v is a view of it), the rotated q and k, the attention's output (flash: no
        scores) and its fp32 log-sum-exp per head, SwiGLU's gate, SiLU, up and product; then the
        final norm, the LM head's input and the loss (`logit_bytes_per_token`)."""
        d, kv = self.d_model, self.kv_heads * self.d_head
        mlp_inputs = 2 if autocast and compute_bytes < FP32_BYTES else 1
        saved = (1 + mlp_inputs) * d + (d + 2 * kv) + d + kv + d + 4 * self.ffn
        layer = 2 * RMS_NORM_BYTES * d + compute_bytes * saved + FP32_BYTES * self.heads
        head = RMS_NORM_BYTES * d + compute_bytes * d
        return float(self.seq * (self.layers * layer + head + self.logit_bytes_per_token(compute_bytes, autocast)))
