"""Where a model's weights are, by role: the input embedding, the repeating layers, the
output projection. Prefill and decode touch each role differently:

* ``token_embd`` is a table a token looks one row up in (``GET_ROWS``), not a matrix
  it is multiplied by: neither phase multiplies it, and decode reads one row of it.
* The output projection (``output.weight``, or ``token_embd`` itself when the model
  ties its embeddings and has no ``output.weight``) turns the last hidden state into
  logits: a prompt computes it for the tokens whose logits are asked for (the last
  one), decode for every token, and each decode token reads the whole matrix once.
* Each repeating layer (``blk.N.*``) is multiplied by every token. An MoE token uses
  ``n_experts_used`` of ``n_experts`` experts, so it reads and multiplies only that
  share of the ``*_exps`` tensors (the estimate's rule for MoE, unchanged).

The split is by tensor name, as llama.cpp names them (gguf's ``MODEL_TENSOR`` names).
Everything else (``output_norm``, rope factors, ...) is "other": a few KiB that every
token reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvtop.runner.model.gguf_header import TensorInfo
from kvtop.runner.model.quant_types import tensor_bytes

INPUT_EMBEDDING = "token_embd.weight"
OUTPUT_PROJECTION = "output.weight"
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class WeightSplit:
    """Bytes and parameters by role. ``layer_*`` have one entry per repeating layer."""

    embd_bytes: int  # token_embd: 0 when the file has none
    output_bytes: int  # the output projection (token_embd's bytes when tied)
    output_params: int
    output_tied: bool
    layer_bytes: tuple[int, ...]  # resident bytes of each layer
    layer_bytes_active: tuple[int, ...]  # bytes one token reads from each layer
    layer_params_active: tuple[int, ...]  # matrix weights one token is multiplied by, per layer
    other_bytes: int  # non-repeating tensors that are neither embedding nor output


def _layer_index(name: str, n_layers: int) -> int | None:
    m = _BLOCK.match(name)
    if m is None:
        return None
    il = int(m.group(1))
    return il if il < n_layers else None


def weight_split(tensors: list[TensorInfo], n_layers: int | None, n_experts: int | None,
                 n_experts_used: int | None) -> WeightSplit | None:
    """The split, or None when a tensor's type is unknown (its bytes cannot be known)
    or the layer count is missing."""
    if not tensors or not n_layers or n_layers <= 0:
        return None
    frac = n_experts_used / n_experts if n_experts and n_experts_used else 1.0
    layer = [0] * n_layers
    active = [0] * n_layers
    params = [0] * n_layers
    embd = embd_params = output = output_params = other = 0
    for t in tensors:
        b = tensor_bytes(t.ggml_type, t.n_elements)
        if b is None:
            return None
        il = _layer_index(t.name, n_layers)
        if t.name == INPUT_EMBEDDING:
            embd, embd_params = b, t.n_elements
        elif t.name == OUTPUT_PROJECTION:
            output, output_params = b, t.n_elements
        elif il is None:
            other += b
        else:
            share = frac if "_exps" in t.name else 1.0
            layer[il] += b
            active[il] += int(b * share)
            if len(t.shape) >= 2:  # norms and biases are vectors: element-wise, not matmuls
                params[il] += int(t.n_elements * share)
    tied = output_params == 0 and embd_params > 0
    if tied:
        output, output_params = embd, embd_params
    return WeightSplit(embd, output, output_params, tied, tuple(layer), tuple(active), tuple(params), other)
