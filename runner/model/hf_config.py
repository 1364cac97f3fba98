"""A Hugging Face model folder's facts (what vLLM serves), as the GGUF reader gives them.

``facts_from_config`` reads the folder's ``config.json`` (its ``text_config`` when the
model is multimodal) and the headers of its ``*.safetensors`` files, and returns the
same ``ModelFacts`` ``facts_from_header`` makes of a GGUF: layers and their head
shapes, hidden size, vocabulary, context, experts, FFN width, and the weights by role
(input embedding, each repeating layer, the output projection, the rest) with their
bytes, so every figure kvtop draws (the batched roof, FLOPs and bytes per token, KV
bytes) comes from one path for both formats.

A safetensors header is 8 bytes of length and a JSON table of tensors (dtype, shape,
byte offsets): only those are read, never the weights. Without safetensors files the
parameters come from the config's shapes (attention, a gated FFN, embeddings), in
its ``dtype``, and a note says so. A figure neither gives is ``None``.
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Any

from kvtop.runner.model.facts import LayerShape, ModelFacts

MAX_HEADER = 100 << 20  # a safetensors header larger than this is refused
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
CONFIG_DTYPES = {"float32": ("F32", 4), "float16": ("F16", 2), "bfloat16": ("BF16", 2), "float": ("F32", 4),
                 "half": ("F16", 2)}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EMBED = re.compile(r"(?:^|\.)(embed_tokens|wte|word_embeddings)\.weight$")
_OUTPUT = re.compile(r"(?:^|\.)(lm_head|embed_out)\.weight$")
_EXPERT = re.compile(r"\.experts\.")
_ENCODER = re.compile(r"vision|visual|multi_modal|mm_projector|audio")


class ConfigError(Exception):
    """A one-line reason why a model folder cannot be read."""


def config_file(path: str) -> str | None:
    """``path``'s ``config.json``: the file itself, or the one in the folder; None otherwise."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    return path if os.path.basename(path) == "config.json" and os.path.isfile(path) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 40 else None


def read_config(path: str) -> dict[str, Any]:
    """The text model's config (``text_config`` of a multimodal one)."""
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = json.loads(fh.read(1 << 20))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: not a JSON object")
    text = cfg.get("text_config")
    return {**cfg, **text} if isinstance(text, dict) else cfg


def safetensors_tensors(folder: str) -> list[tuple[str, str, int, int, int]] | None:
    """(name, dtype, elements, bytes, dimensions) of every tensor in the folder's safetensors files,
    from their headers; None without any such file or with one kvtop cannot read."""
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    if not files:
        return None
    out: list[tuple[str, str, int, int, int]] = []
    for name in files:
        try:
            with open(os.path.join(folder, name), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > MAX_HEADER:
                    return None
                table = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            return None
        if not isinstance(table, dict):
            return None
        for key, t in table.items():
            if key == "__metadata__" or not isinstance(t, dict):
                continue
            shape, offsets = t.get("shape"), t.get("data_offsets")
            if not (isinstance(shape, list) and all(_int(s) or s == 0 for s in shape)
                    and isinstance(offsets, list) and len(offsets) == 2):
                return None
            elements = 1
            for s in shape:
                elements *= s
            out.append((key, str(t.get("dtype")), elements, int(offsets[1]) - int(offsets[0]), len(shape)))
    return out


def _layer_shapes(cfg: dict[str, Any], n_layers: int | None, n_embd: int | None) -> list[LayerShape]:
    heads = _int(cfg.get("num_attention_heads"))
    kv = _int(cfg.get("num_key_value_heads")) or heads
    head_dim = _int(cfg.get("head_dim")) or (n_embd // heads if n_embd and heads else None)
    types = cfg.get("layer_types")
    window = _int(cfg.get("sliding_window"))
    out = []
    for il in range(n_layers or 0):
        sliding = (isinstance(types, list) and len(types) == n_layers and types[il] == "sliding_attention") or (
            not isinstance(types, list) and window is not None and bool(cfg.get("use_sliding_window", False)))
        out.append(LayerShape("sliding" if sliding and window else "full", heads, kv, head_dim, head_dim))
    return out


def _split(tensors: list[tuple[str, str, int, int, int]], n_layers: int, frac: float) -> dict[str, Any]:
    """The weights by role, as runner.model.weights splits a GGUF's; a multimodal model's
    encoders and projector are in no role (a text token never reads them)."""
    layer, active, params = [0] * n_layers, [0] * n_layers, [0] * n_layers
    embd = embd_params = output = output_params = other = expert = 0
    for name, _dtype, n, b, dims in tensors:
        if _ENCODER.search(name):
            continue
        m = _LAYER.search(name)
        il = int(m.group(1)) if m else None
        if _EMBED.search(name) and il is None:
            embd, embd_params = b, n
        elif _OUTPUT.search(name):
            output, output_params = b, n
        elif il is None or il >= n_layers:
            other += b
        else:
            share = frac if _EXPERT.search(name) else 1.0
            expert += n if share != 1.0 else 0
            layer[il] += b
            active[il] += int(b * share)
            if dims >= 2:  # norms and biases are vectors: element-wise, not matmuls
                params[il] += int(n * share)
    tied = output_params == 0 and embd_params > 0
    if tied:
        output, output_params = embd, embd_params
    return {"embd_bytes": embd, "output_bytes": output, "output_params": output_params, "output_tied": tied,
            "layer_bytes": layer, "layer_bytes_active": active, "layer_params_active": params,
            "other_bytes": other, "expert_params": expert}


def _shapes_split(cfg: dict[str, Any], layers: list[LayerShape], n_embd: int, n_vocab: int, n_ff: int,
                  size: int, experts: tuple[int | None, int | None]) -> dict[str, Any]:
    """The weights by role from the config's shapes alone (no safetensors): attention's
    Q, K, V and O, a gated FFN (three matrices; every expert's for an MoE), embeddings."""
    n_exp, used = experts
    per_layer, active = [], []
    for ls in layers:
        attn = n_embd * ((ls.n_head or 0) + 2 * (ls.n_head_kv or 0)) * (ls.head_dim_k or 0) \
            + (ls.n_head or 0) * (ls.head_dim_k or 0) * n_embd
        ffn = 3 * n_embd * n_ff
        per_layer.append(attn + ffn * (n_exp or 1))
        active.append(attn + ffn * (used or 1))
    embd = n_vocab * n_embd
    tied = bool(cfg.get("tie_word_embeddings", False))
    return {"embd_bytes": embd * size, "output_bytes": embd * size, "output_params": embd, "output_tied": tied,
            "layer_bytes": [p * size for p in per_layer], "layer_bytes_active": [p * size for p in active],
            "layer_params_active": active, "other_bytes": 0,
            "expert_params": 3 * n_embd * n_ff * n_exp * len(layers) if n_exp and used else 0}


def facts_from_config(path: str) -> ModelFacts:
    """The facts of the model folder ``path`` (or its ``config.json``); ``ConfigError``
    when it has no readable config."""
    cfg_path = config_file(path)
    if cfg_path is None:
        raise ConfigError(f"{path}: no config.json")
    folder = os.path.dirname(os.path.abspath(cfg_path))
    cfg = read_config(cfg_path)
    notes: list[str] = ["facts from the Hugging Face folder's config.json"]
    n_layers, n_embd = _int(cfg.get("num_hidden_layers")), _int(cfg.get("hidden_size"))
    n_vocab, n_ff = _int(cfg.get("vocab_size")), _int(cfg.get("intermediate_size"))
    n_exp = _int(cfg.get("num_local_experts")) or _int(cfg.get("num_experts")) or _int(cfg.get("n_routed_experts"))
    used = _int(cfg.get("num_experts_per_tok")) if n_exp else None
    n_ff_exp = _int(cfg.get("moe_intermediate_size")) if n_exp else None
    layers = _layer_shapes(cfg, n_layers, n_embd)
    if _int(cfg.get("kv_lora_rank")):  # MLA: one latent per token and layer (runner.physics.kv_bytes)
        layers = [LayerShape("latent", ls.n_head, ls.n_head_kv, ls.head_dim_k, ls.head_dim_v) for ls in layers]
    tensors = safetensors_tensors(folder)
    dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or "")
    split: dict[str, Any] = {}
    n_params: int | None
    weights: int | None
    file_type = CONFIG_DTYPES.get(dtype, (None, 0))[0]
    if tensors is not None and n_layers:
        frac = used / n_exp if n_exp and used else 1.0
        split = _split(tensors, n_layers, frac)
        kinds: dict[str, int] = {}
        for _name, dt, n, _b, _dims in tensors:
            kinds[dt] = kinds.get(dt, 0) + n
        file_type = max(kinds, key=kinds.__getitem__) if kinds else file_type
        n_params = sum(t[2] for t in tensors)
        weights = sum(t[3] for t in tensors)
    elif n_layers and n_embd and n_vocab and (n_ff_exp or n_ff) and dtype in CONFIG_DTYPES:
        notes.append("no safetensors headers: parameters from config.json's shapes (a gated FFN assumed)")
        split = _shapes_split(cfg, layers, n_embd, n_vocab, n_ff_exp or n_ff or 0, CONFIG_DTYPES[dtype][1],
                              (n_exp, used))
        n_params = sum(split["layer_bytes"]) // CONFIG_DTYPES[dtype][1] + n_vocab * n_embd * (
            1 if split["output_tied"] else 2)
        weights = n_params * CONFIG_DTYPES[dtype][1]
    else:
        notes.append("no safetensors headers and too few shapes in config.json: parameters unknown")
        n_params = weights = None
    active_bytes = (weights - sum(split["layer_bytes"]) + sum(split["layer_bytes_active"])
                    if weights is not None and split else weights)
    experts = split.pop("expert_params", 0)
    frac = used / n_exp if n_exp and used else 1.0
    active_params = n_params - experts + int(experts * frac) if n_params is not None else None
    arch = cfg.get("model_type")
    name = cfg.get("_name_or_path") or cfg.get("_model_name_or_path")
    return ModelFacts(
        path=folder, architecture=arch if isinstance(arch, str) else None,
        name=name if isinstance(name, str) else os.path.basename(folder), n_layers=n_layers, n_embd=n_embd,
        n_vocab=n_vocab, n_ctx_train=_int(cfg.get("max_position_embeddings")), layers=layers,
        sliding_window=_int(cfg.get("sliding_window")), kv_lora_rank=_int(cfg.get("kv_lora_rank")),
        rope_dim=_int(cfg.get("qk_rope_head_dim")), ssm={}, n_experts=n_exp, n_experts_used=used,
        n_params=n_params, n_params_active=active_params, weights_bytes=weights, weights_bytes_active=active_bytes,
        file_type=file_type, chat_template=None, notes=notes, n_ff=None if n_exp else n_ff, n_ff_exp=n_ff_exp,
        **split,
    )


def kv_bytes_per_token(facts: ModelFacts, value_bytes: int) -> int | None:
    """K and V of every attention layer, ``n_head_kv × head_dim`` values each, at
    ``value_bytes`` a value (the cache's dtype); None when a layer's shape is unknown."""
    total = 0
    for ls in facts.layers:
        if ls.kind == "recurrent":
            continue
        if ls.kind == "latent":  # MLA: one compressed latent and the rope part per token
            if not facts.kv_lora_rank:
                return None
            total += (facts.kv_lora_rank + (facts.rope_dim or 0)) * value_bytes
            continue
        if not ls.n_head_kv or not ls.head_dim_k:
            return None
        total += ls.n_head_kv * (ls.head_dim_k + (ls.head_dim_v or ls.head_dim_k)) * value_bytes
    return total or None
