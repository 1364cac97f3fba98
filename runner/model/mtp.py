"""Multi-token prediction heads in a GGUF: ``blk.N.nextn.*`` tensors.

A model trained with MTP (DeepSeek-V3, GLM-4.5, ...) carries its next-token heads as the
last ``nextn_predict_layers`` blocks: block N holds a whole layer (attention, FFN) and
the ``nextn.*`` tensors that join the last hidden state with the embedding of the token
just sampled (``eh_proj``, ``enorm``, ``hnorm``, ``shared_head_*``). llama.cpp's main
graph skips those blocks; ``--spec-type draft-mtp`` runs them to draft. What drafting a
token reads is the whole block's bytes (and the output projection: the estimate counts
it with the verify pass's logits).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvtop.runner.model.gguf_header import TensorInfo
from kvtop.runner.model.quant_types import tensor_bytes

_NEXTN = re.compile(r"^blk\.(\d+)\.nextn\.")
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class MTPHeads:
    layers: tuple[int, ...]  # the blocks with nextn.* tensors
    bytes: int | None  # all their tensors' bytes (None: a tensor type unknown)


def mtp_heads(tensors: Sequence[TensorInfo]) -> MTPHeads | None:
    """The MTP blocks of a tensor list, or None when it has no ``nextn`` tensor."""
    layers = sorted({int(m.group(1)) for t in tensors if (m := _NEXTN.match(t.name))})
    if not layers:
        return None
    total: int | None = 0
    for t in tensors:
        m = _BLOCK.match(t.name)
        if m and int(m.group(1)) in layers:
            b = tensor_bytes(t.ggml_type, t.n_elements)
            total = None if b is None or total is None else total + b
    return MTPHeads(tuple(layers), total)
