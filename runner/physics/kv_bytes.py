"""KV cache bytes, exactly as llama.cpp allocates them.

The reading's rule is ``2 x layers x kv_heads x head_dim x bytes x tokens``. llama.cpp
refines it per layer:

* K and V rows are ``ggml_row_size(type, kv_heads x head_dim)``: quantised cache
  types (q8_0, q4_0, ...) store blocks of 32 values with a scale, so bytes per value
  are fractional (q8_0: 34 bytes per 32 values).
* Full-attention layers hold ``n_ctx`` cells.
* Sliding-window layers hold ``min(n_ctx, pad(n_swa x n_seq + n_ubatch, 256))`` cells,
  or ``n_ctx`` when the cache is kept full size (``swa_full``; llama-cpp-python's
  default, llama.cpp's ``--swa-full``).
* MLA (DeepSeek-style latent attention) stores one compressed latent of
  ``kv_lora_rank + rope_dim`` values per token and layer, and no separate V.
* Recurrent layers (Mamba-style) keep a constant-size f32 state per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.runner.model.facts import LayerShape, ModelFacts
from kvtop.runner.model.quant_types import KV_CACHE_TYPES, row_bytes
from kvtop.runner.units import pad  # llama.cpp's padding to N_CTX_PAD (256)

F32 = KV_CACHE_TYPES["f32"]


def kv_bytes_simple(layers: int, kv_heads: int, head_dim: int, tokens: int,
                    batch: int = 1, bytes_per_value: float = 2) -> float:
    """The reading's formula: 2 (K and V) x layers x kv_heads x head_dim x tokens x bytes."""
    return 2 * layers * kv_heads * head_dim * tokens * batch * bytes_per_value


@dataclass(frozen=True)
class KVKindBytes:
    """Cache bytes of one attention kind at a given context."""

    kind: str
    n_layers: int
    cells: int  # cells per layer allocated (0 for recurrent)
    bytes_per_token: float  # bytes one more token adds (0 for recurrent)
    bytes_allocated: int

    def bytes_used(self, tokens: int) -> int:
        if self.kind == "recurrent":
            return self.bytes_allocated
        return int(self.bytes_per_token * min(tokens, self.cells))


@dataclass(frozen=True)
class KVLayout:
    n_ctx: int
    type_k: str
    type_v: str
    swa_full: bool
    kinds: tuple[KVKindBytes, ...]
    unknown_layers: int

    @property
    def bytes_allocated(self) -> int:
        return sum(k.bytes_allocated for k in self.kinds)

    @property
    def bytes_per_token(self) -> float:
        """Bytes one token adds across all layers (before any window caps)."""
        return sum(k.bytes_per_token for k in self.kinds)

    def bytes_used(self, tokens: int) -> int:
        return sum(k.bytes_used(tokens) for k in self.kinds)

    def by_kind(self) -> dict[str, KVKindBytes]:
        return {k.kind: k for k in self.kinds}


def _layer_row_bytes(layer: LayerShape, facts: ModelFacts, tk: int, tv: int) -> int | None:
    if layer.kind == "latent":
        if facts.kv_lora_rank is None or facts.rope_dim is None:
            return None
        return row_bytes(tk, facts.kv_lora_rank + facts.rope_dim)
    n_kv, dk, dv = layer.n_head_kv, layer.head_dim_k, layer.head_dim_v
    if n_kv is None or dk is None or dv is None:
        return None
    return row_bytes(tk, n_kv * dk) + row_bytes(tv, n_kv * dv)


def recurrent_state_bytes(facts: ModelFacts, n_seq: int = 1) -> int | None:
    """Per-layer conv + SSM state bytes (f32), as llama.cpp's n_embd_r/n_embd_s."""
    s = facts.ssm
    try:
        d_conv, d_inner, d_state = s["conv_kernel"], s["inner_size"], s["state_size"]
    except KeyError:
        return None
    n_group = s.get("group_count", 0)
    r = (d_conv - 1) * (d_inner + 2 * n_group * d_state)
    st = d_state * d_inner
    return (r + st) * 4 * n_seq


def kv_layout(
    facts: ModelFacts,
    n_ctx: int,
    type_k: str = "f16",
    type_v: str = "f16",
    swa_full: bool = False,
    n_ubatch: int = 512,
    n_seq: int = 1,
) -> KVLayout:
    tk = KV_CACHE_TYPES[type_k]
    tv = KV_CACHE_TYPES[type_v]
    n_ctx = pad(n_ctx)
    groups: dict[str, list[int]] = {}
    unknown = 0
    for layer in facts.layers:
        if layer.kind == "recurrent":
            b = recurrent_state_bytes(facts, n_seq)
        else:
            b = _layer_row_bytes(layer, facts, tk, tv)
        if b is None:
            unknown += 1
            continue
        groups.setdefault(layer.kind, []).append(b)
    kinds = []
    for kind in ("full", "sliding", "latent", "recurrent"):
        rows = groups.get(kind)
        if not rows:
            continue
        if kind == "recurrent":
            kinds.append(KVKindBytes(kind, len(rows), 0, 0.0, sum(rows)))
            continue
        cells = n_ctx
        if kind == "sliding" and not swa_full and facts.sliding_window:
            cells = min(n_ctx, pad(facts.sliding_window * n_seq + n_ubatch))
        per_token = float(sum(rows))
        kinds.append(KVKindBytes(kind, len(rows), cells, per_token, int(per_token * cells)))
    return KVLayout(n_ctx, type_k, type_v, swa_full, tuple(kinds), unknown)


def kv_bytes_read_at_depth(layout: KVLayout, depth: int) -> int:
    """KV bytes one decode step reads at context depth ``depth`` (windows capped)."""
    total = 0
    for k in layout.kinds:
        if k.kind == "recurrent":
            total += k.bytes_allocated
        else:
            total += int(k.bytes_per_token * min(depth, k.cells))
    return total


@dataclass(frozen=True)
class LayerKV:
    """One layer's cache: ``per_token`` bytes in each of ``cells`` cells, or a fixed
    recurrent state (``fixed``)."""

    per_token: float
    cells: int
    fixed: int = 0

    @property
    def allocated(self) -> int:
        return int(self.per_token * self.cells) + self.fixed

    def read_at(self, depth: int) -> int:
        """Bytes one decode step reads from this layer's cache at context ``depth``."""
        return int(self.per_token * min(depth, self.cells)) + self.fixed


def layer_kv(facts: ModelFacts, layout: KVLayout) -> list[LayerKV]:
    """Each layer's cache in ``layout`` (a layer whose shape is unknown holds none):
    where the layers go, their caches go (runner.physics.placement)."""
    tk = KV_CACHE_TYPES[layout.type_k]
    tv = KV_CACHE_TYPES[layout.type_v]
    cells = {k.kind: k.cells for k in layout.kinds}
    out = []
    for layer in facts.layers:
        if layer.kind == "recurrent":
            b = recurrent_state_bytes(facts)
            out.append(LayerKV(0.0, 0, b or 0))
            continue
        b = _layer_row_bytes(layer, facts, tk, tv)
        out.append(LayerKV(float(b), cells.get(layer.kind, 0)) if b is not None else LayerKV(0.0, 0))
    return out
