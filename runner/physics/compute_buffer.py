"""llama.cpp's compute buffer, from the model's shape.

llama.cpp sizes the buffer once, when the context is created: it builds the graph of the
worst-case micro-batch (``n_tokens = min(n_ubatch, n_batch, n_ctx)`` tokens, every one
of them asking for logits, the whole KV cache attended) and ggml's allocator lays its
tensors out, reusing a tensor's memory once nothing reads it any more. The buffer is
the largest set of tensors alive at one time. Three moments compete:

* **the output**: the logits of every token of the micro-batch (``n_vocab x n_tokens``
  f32) beside the last hidden state and its norm (``2 x n_embd x n_tokens`` f32). For
  the demo model at ``-ub 512`` that is 96 + 2.25 MiB, and llama.cpp prints 98.25.
* **attention in a layer**: the KQ mask (``n_kv x n_tokens``, f32, or f16 with flash
  attention; one per attention kind, alive through all layers), and without flash
  attention the scores (``n_kv x n_tokens x n_head`` f32), beside the layer's
  activations (``3 x n_embd + 2 x q + 2 x kv`` per token: the residual, its norm, the
  projection out; Q and its rotation; K and V). With flash attention the scores are
  never materialised (the kernel works tile by tile).
* **the FFN in a layer**: the masks beside gate, up and their product (``3 x n_ff``;
  an MoE's used experts: ``n_experts_used x n_ff_exp``, plus shared experts) and
  ``4 x n_embd``.

Beside the graph, llama.cpp keeps an output buffer for the logits it hands back: one
row of ``n_vocab`` f32 per sequence (it grows only when a batch asks for more logits,
which kvtop does not).

Measured against what llama.cpp prints (tests/unit/runner/physics/test_compute_buffer.py)
on the demo model and Gemma-3 270M, and while writing this on random-weight llamas and
a qwen3moe with the FFN or the attention made the largest: the terms above matched to
0.1 MiB, except where ggml's allocator leaves a hole a freed tensor does not fill (up to
4.2% more, seen at n_ctx 2048). Measured on the CPU backend only; on a GPU the same graph
is split between the devices by where the layers run (runner.physics.device_split).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.kv_bytes import KVLayout

F32 = 4
F16 = 2


@dataclass(frozen=True)
class ComputeBuffer:
    """The parts of llama.cpp's compute memory, in bytes."""

    n_tokens: int  # tokens of the worst-case micro-batch
    flash_attn: bool
    output_phase: int  # logits of every token + the last hidden state and its norm
    masks: int  # KQ masks, alive through every layer
    attention_phase: int  # masks + scores (no flash attention) + a layer's activations
    ffn_phase: int  # masks + a layer's FFN activations
    output_buffer: int  # the logits llama.cpp hands back (its own buffer)

    @property
    def layer_phase(self) -> int:
        """The largest moment inside a repeating layer."""
        return max(self.attention_phase, self.ffn_phase)

    @property
    def graph(self) -> int:
        """llama.cpp's "compute buffer size": the largest moment of the graph."""
        return max(self.output_phase, self.layer_phase)

    @property
    def total(self) -> int:
        """Compute plus output buffer (what runner.llama_buffers adds as compute)."""
        return self.graph + self.output_buffer


def flash_attention_on(flash_attn: str | bool) -> bool:
    """llama.cpp's ``auto`` turns flash attention on where every device supports it (the
    CPU does; kvtop's engine reports "auto" and the buffer matches "on")."""
    if isinstance(flash_attn, bool):
        return flash_attn
    return flash_attn != "off"


def _ffn_width(facts: ModelFacts) -> int:
    widths = [facts.n_ff or 0]
    if facts.n_experts and facts.n_experts_used and facts.n_ff_exp:
        widths.append(facts.n_experts_used * facts.n_ff_exp + (facts.n_ff_shexp or 0))
    return max(widths)


def _attention_layers(facts: ModelFacts, layout: KVLayout) -> Iterator[tuple[int, int, int, int]]:
    """(cells attended, heads, q width, kv width) per attention layer."""
    cells = {k.kind: k.cells for k in layout.kinds}
    for layer in facts.layers:
        if layer.kind == "recurrent" or layer.kind not in cells or not layer.n_head:
            continue
        hk = layer.head_dim_k or 0
        q = layer.n_head * hk
        if layer.kind == "latent":
            kv = (facts.kv_lora_rank or 0) + (facts.rope_dim or 0)
        else:
            kv = (layer.n_head_kv or 0) * (hk + (layer.head_dim_v or hk))
        yield cells[layer.kind], layer.n_head, q, kv


def compute_buffer(facts: ModelFacts, layout: KVLayout, n_ubatch: int = 512, n_batch: int = 512,
                   flash_attn: str | bool = "auto", n_seq: int = 1) -> ComputeBuffer | None:
    """The compute buffer llama.cpp reserves, or None when the shape is not known
    (no vocabulary or embedding size)."""
    if not facts.n_vocab or not facts.n_embd:
        return None
    fa = flash_attention_on(flash_attn)
    n_tok = max(1, min(n_ubatch, n_batch, layout.n_ctx))
    e = facts.n_embd
    output = F32 * n_tok * (facts.n_vocab + 2 * e)
    kinds = {k.kind: k.cells for k in layout.kinds if k.kind in ("full", "sliding", "latent")}
    masks = sum(cells * n_tok * (F16 if fa else F32) for cells in kinds.values())
    attention = 0
    for n_kv, n_head, q, kv in _attention_layers(facts, layout):
        scores = 0 if fa else F32 * n_kv * n_tok * n_head
        attention = max(attention, scores + F32 * n_tok * (3 * e + 2 * q + kv))
    ffn = F32 * n_tok * (3 * _ffn_width(facts) + 4 * e)
    return ComputeBuffer(
        n_tokens=n_tok, flash_attn=fa, output_phase=output, masks=masks,
        attention_phase=masks + attention, ffn_phase=masks + ffn,
        output_buffer=F32 * facts.n_vocab * n_seq,
    )
