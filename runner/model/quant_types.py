"""GGML tensor types: block sizes, bytes per block, and llama.cpp's KV cache type names.

The sizes come from the ``gguf`` package (``GGML_QUANT_SIZES``), the same table
llama.cpp's Python tooling uses, so a weight or KV byte count here is exact.
"""

from __future__ import annotations

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

# llama.cpp's -ctk/-ctv names (common/arg.cpp kv_cache_types) -> ggml type id.
KV_CACHE_TYPES: dict[str, int] = {
    "f32": int(GGMLQuantizationType.F32),
    "f16": int(GGMLQuantizationType.F16),
    "bf16": int(GGMLQuantizationType.BF16),
    "q8_0": int(GGMLQuantizationType.Q8_0),
    "q4_0": int(GGMLQuantizationType.Q4_0),
    "q4_1": int(GGMLQuantizationType.Q4_1),
    "iq4_nl": int(GGMLQuantizationType.IQ4_NL),
    "q5_0": int(GGMLQuantizationType.Q5_0),
    "q5_1": int(GGMLQuantizationType.Q5_1),
}


def type_name(ggml_type: int) -> str:
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type{ggml_type}"


def block_size(ggml_type: int) -> tuple[int, int] | None:
    """(elements per block, bytes per block), or None for a type we do not know."""
    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None


def row_bytes(ggml_type: int, n_elements: int) -> int:
    """ggml_row_size: bytes for n_elements of a type (n must fill whole blocks)."""
    bs = block_size(ggml_type)
    if bs is None:
        raise ValueError(f"unknown ggml type {ggml_type}")
    per_block, nbytes = bs
    if n_elements % per_block:
        raise ValueError(
            f"{n_elements} elements do not fill whole {type_name(ggml_type)} blocks of {per_block}"
        )
    return n_elements // per_block * nbytes


def tensor_bytes(ggml_type: int, n_elements: int) -> int | None:
    """Bytes of a tensor, or None when its type is unknown."""
    bs = block_size(ggml_type)
    if bs is None:
        return None
    per_block, nbytes = bs
    return (n_elements + per_block - 1) // per_block * nbytes
