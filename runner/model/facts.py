"""What a GGUF says about a model's shape, read from metadata and tensor infos alone.

Every figure the estimate needs comes from here: layers, heads per layer, head
sizes, which layers use a sliding window, MLA latents, recurrent layers, experts,
parameter count and weight bytes. A figure the file does not give is ``None``
("unknown"), never a silent guess; the ``notes`` list says what was inferred.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from kvtop.runner.model.gguf_header import ArraySummary, GGUFHeader
from kvtop.runner.model.mtp import mtp_heads
from kvtop.runner.model.quant_types import tensor_bytes, type_name
from kvtop.runner.model.weights import WeightSplit, weight_split

# llama.cpp's hard-coded sliding-window layer patterns (llama-model.cpp,
# hparams.set_swa_pattern(n)): layer il slides when il % n < n - 1.
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "exaone4": 4}
# Architectures whose every layer is recurrent (constant-size state, no KV).
RECURRENT_ARCHS = {"mamba", "mamba2", "rwkv6", "rwkv7", "rwkv6qwen2", "rwkv7qwen3"}


@dataclass(frozen=True)
class LayerShape:
    """One layer's attention kind and cache shape."""

    kind: str  # "full", "sliding", "latent" (MLA) or "recurrent"
    n_head: int | None
    n_head_kv: int | None
    head_dim_k: int | None
    head_dim_v: int | None


@dataclass
class ModelFacts:
    path: str
    architecture: str | None
    name: str | None
    n_layers: int | None
    n_embd: int | None
    n_vocab: int | None
    n_ctx_train: int | None
    layers: list[LayerShape]
    sliding_window: int | None
    kv_lora_rank: int | None
    rope_dim: int | None
    ssm: dict[str, int]
    n_experts: int | None
    n_experts_used: int | None
    n_params: int | None
    n_params_active: int | None
    weights_bytes: int | None
    weights_bytes_active: int | None
    file_type: str | None
    chat_template: str | None
    notes: list[str] = field(default_factory=list)
    # FFN widths (the compute buffer): the dense FFN (None for an MoE without dense
    # layers), one expert's, the shared experts' together.
    n_ff: int | None = None
    n_ff_exp: int | None = None
    n_ff_shexp: int | None = None
    # The weights by role (runner.model.weights): None or empty when the tensor list
    # or a tensor type is unknown, and in facts recorded before the split existed.
    embd_bytes: int | None = None  # token_embd: a row lookup, never read whole
    output_bytes: int | None = None  # the output projection (token_embd when tied)
    output_params: int | None = None
    output_tied: bool | None = None
    layer_bytes: list[int] = field(default_factory=list)  # resident, per repeating layer
    layer_bytes_active: list[int] = field(default_factory=list)  # read by one token, per layer
    layer_params_active: list[int] = field(default_factory=list)  # matrix weights per token, per layer
    other_bytes: int | None = None  # output_norm, rope factors, ...
    # MTP heads (runner.model.mtp): the blocks with blk.N.nextn.* tensors and their bytes
    mtp_layers: tuple[int, ...] = ()
    mtp_bytes: int | None = None

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for layer in self.layers:
            counts[layer.kind] = counts.get(layer.kind, 0) + 1
        return counts


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _per_layer(v: Any, n_layers: int) -> list[int | None] | None:
    """A scalar or per-layer array metadata value as one entry per layer."""
    if v is None:
        return None
    if isinstance(v, list):
        vals = [_int(x) for x in v]
        if len(vals) != n_layers:
            return None
        return vals
    if isinstance(v, ArraySummary):
        return None
    return [_int(v)] * n_layers


_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 38: "MXFP4_MOE",
}


def _layer_shapes(arch: str | None, md: dict[str, Any], p: str, n_layers: int | None, n_embd: int | None,
                  sliding_window: int | None, kv_lora_rank: int | None, ssm: dict[str, int],
                  notes: list[str]) -> list[LayerShape]:
    """Each layer's attention kind and head shapes, from the per-layer metadata."""
    def get(key: str) -> Any:
        return md.get(p + key)

    layers: list[LayerShape] = []
    if n_layers is None or n_layers <= 0:
        return layers
    heads = _per_layer(get("attention.head_count"), n_layers)
    heads_kv = _per_layer(get("attention.head_count_kv"), n_layers)
    if heads_kv is None and heads is not None:
        heads_kv = heads
        notes.append("head_count_kv absent: assumed equal to head_count (MHA)")
    key_len = _int(get("attention.key_length"))
    val_len = _int(get("attention.value_length"))
    swa_flags = _swa_flags(arch, md, p, n_layers, sliding_window, notes)
    for il in range(n_layers):
        nh = heads[il] if heads else None
        nkv = heads_kv[il] if heads_kv else None
        hk = key_len
        if hk is None and n_embd and nh:
            hk = n_embd // nh
        hv = val_len if val_len is not None else hk
        if arch in RECURRENT_ARCHS or (ssm and heads_kv is not None and nkv == 0):
            kind = "recurrent"
        elif kv_lora_rank:
            kind = "latent"
        elif swa_flags and swa_flags[il]:
            kind = "sliding"
        else:
            kind = "full"
        layers.append(LayerShape(kind, nh, nkv, hk, hv))
    return layers


Counts = tuple[int | None, int | None, int | None, int | None]


def _parameter_counts(header: GGUFHeader, n_experts: int | None, n_experts_used: int | None,
                      notes: list[str]) -> Counts:
    """(params, weight bytes, active params, active weight bytes) from the tensor infos;
    an MoE's active share counts only the experts a token uses."""
    if not header.tensors:
        notes.append("no tensor infos: parameter count and weight bytes unknown")
        return None, None, None, None
    n_params = total = 0
    expert_params = expert_bytes = 0
    unknown_types: set[int] = set()
    for t in header.tensors:
        n = t.n_elements
        b = tensor_bytes(t.ggml_type, n)
        if b is None:
            unknown_types.add(t.ggml_type)
            b = 0
        n_params += n
        total += b
        if "_exps" in t.name:
            expert_params += n
            expert_bytes += b
    if unknown_types:
        notes.append(f"unknown tensor types {sorted(unknown_types)}: their bytes not counted")
    weights = None if unknown_types else total
    if n_experts and n_experts_used and expert_params:
        frac = n_experts_used / n_experts
        n_active = n_params - expert_params + int(expert_params * frac)
        weights_active = weights - expert_bytes + int(expert_bytes * frac) if weights is not None else None
        return n_params, weights, n_active, weights_active
    return n_params, weights, n_params, weights


def _file_type(header: GGUFHeader, md: dict[str, Any]) -> str | None:
    """The GGUF's file type, else the type that holds most of the matrices' elements."""
    ft = _int(md.get("general.file_type"))
    file_type = _FILE_TYPES.get(ft) if ft is not None else None
    if file_type is None and header.tensors:
        counts: dict[int, int] = {}
        for t in header.tensors:
            if len(t.shape) >= 2:
                counts[t.ggml_type] = counts.get(t.ggml_type, 0) + t.n_elements
        if counts:
            file_type = type_name(max(counts, key=counts.__getitem__))
    return file_type


def facts_from_header(header: GGUFHeader) -> ModelFacts:
    md = header.metadata
    notes: list[str] = []
    arch = md.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    p = f"{arch}." if arch else ""

    def get(key: str) -> Any:
        return md.get(p + key)

    n_layers = _int(get("block_count"))
    n_embd = _int(get("embedding_length"))
    n_ctx_train = _int(get("context_length"))
    tokens = md.get("tokenizer.ggml.tokens")
    n_vocab = _int(get("vocab_size"))
    if n_vocab is None and tokens is not None:
        n_vocab = tokens.length if isinstance(tokens, ArraySummary) else len(tokens)
    sliding_window = _int(get("attention.sliding_window"))
    kv_lora_rank = _int(get("attention.kv_lora_rank"))
    rope_dim = _int(get("rope.dimension_count"))
    ssm = {
        k: v
        for k in ("conv_kernel", "inner_size", "state_size", "group_count", "time_step_rank")
        if (v := _int(get(f"ssm.{k}"))) is not None
    }
    layers = _layer_shapes(arch, md, p, n_layers, n_embd, sliding_window, kv_lora_rank, ssm, notes)
    n_experts = _int(get("expert_count"))
    n_experts_used = _int(get("expert_used_count"))
    n_params, weights, n_active, weights_active = _parameter_counts(header, n_experts, n_experts_used, notes)
    file_type = _file_type(header, md)
    tmpl = md.get("tokenizer.chat_template")
    name = md.get("general.name")
    split = weight_split(header.tensors, n_layers, n_experts, n_experts_used)
    mtp = mtp_heads(header.tensors)
    if mtp is not None:
        notes.append(f"carries {len(mtp.layers)} MTP head{'s' if len(mtp.layers) > 1 else ''} "
                     f"(blk.{mtp.layers[0]}.nextn.*): llama-server's --spec-type draft-mtp drafts with them")
    return ModelFacts(
        path=header.path,
        architecture=arch,
        name=name if isinstance(name, str) else None,
        n_layers=n_layers,
        n_embd=n_embd,
        n_vocab=n_vocab,
        n_ctx_train=n_ctx_train,
        layers=layers,
        sliding_window=sliding_window,
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        ssm=ssm,
        n_experts=n_experts,
        n_experts_used=n_experts_used,
        n_params=n_params,
        n_params_active=n_active,
        weights_bytes=weights,
        weights_bytes_active=weights_active,
        file_type=file_type,
        chat_template=tmpl if isinstance(tmpl, str) else None,
        notes=notes,
        **_ffn_widths(get, n_experts),
        **_split_fields(split),
        mtp_layers=mtp.layers if mtp else (),
        mtp_bytes=mtp.bytes if mtp else None,
    )


class _FfnWidths(TypedDict):
    n_ff: int | None
    n_ff_exp: int | None
    n_ff_shexp: int | None


class _SplitFields(TypedDict, total=False):
    embd_bytes: int
    output_bytes: int
    output_params: int
    output_tied: bool
    layer_bytes: list[int]
    layer_bytes_active: list[int]
    layer_params_active: list[int]
    other_bytes: int


def _ffn_widths(get: Callable[[str], Any], n_experts: int | None) -> _FfnWidths:
    """The FFN widths llama.cpp reads (``feed_forward_length`` may be per layer)."""
    ff = get("feed_forward_length")
    widths = [x for x in (ff if isinstance(ff, list) else [ff]) if _int(x)]
    n_ff = max(widths) if widths else None
    n_ff_exp = _int(get("expert_feed_forward_length"))
    shexp = _int(get("expert_shared_feed_forward_length"))
    shared = _int(get("expert_shared_count"))
    if shexp is None and n_ff_exp and shared:
        shexp = shared * n_ff_exp
    if n_experts and not _int(get("leading_dense_block_count")):
        n_ff = None  # every layer is MoE: feed_forward_length describes no layer that runs
    return {"n_ff": n_ff, "n_ff_exp": n_ff_exp, "n_ff_shexp": shexp}


def _split_fields(split: WeightSplit | None) -> _SplitFields:
    if split is None:
        return {}
    return {"embd_bytes": split.embd_bytes, "output_bytes": split.output_bytes,
            "output_params": split.output_params, "output_tied": split.output_tied,
            "layer_bytes": list(split.layer_bytes), "layer_bytes_active": list(split.layer_bytes_active),
            "layer_params_active": list(split.layer_params_active), "other_bytes": split.other_bytes}


def _swa_flags(
    arch: str | None, md: dict[str, Any], p: str, n_layers: int,
    sliding_window: int | None, notes: list[str],
) -> list[bool] | None:
    if not sliding_window:
        return None
    pattern = md.get(p + "attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == n_layers:
        return [bool(x) for x in pattern]
    n = _int(pattern) if pattern is not None else SWA_PATTERNS.get(arch or "")
    if n is None:
        notes.append(
            "sliding_window given but no per-layer pattern known for this architecture: "
            "treated as every layer sliding"
        )
        return [True] * n_layers
    return [n == 0 or il % n < n - 1 for il in range(n_layers)]
