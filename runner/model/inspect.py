"""What kvtop learns from a model file before anything loads it, and the one check
every command runs on it.

``load_facts`` is that check: ``kvtop estimate``, ``kvtop bench`` and the UI's load
path all call it, so a file is refused by each of them for the same reason, in the
same words, before llama.cpp sees it (some malformed files abort llama.cpp).
"""

from __future__ import annotations

import re

from kvtop.runner.model.facts import ModelFacts, facts_from_header
from kvtop.runner.model.gguf_header import GGUFFormatError, GGUFHeader, check_loadable, read_header

MAX_LAYERS = 4096


class ModelFileError(Exception):
    """A one-line reason why a model file cannot be used."""


def load_facts(path: str, *, need_weights: bool = False) -> ModelFacts:
    """The file's facts, or ``ModelFileError`` naming the file and the reason.

    ``need_weights=False`` (``kvtop estimate``): a header-only or truncated file is
    fine, the facts say the estimate comes from the header only. ``need_weights=True``
    (``kvtop bench``, the UI before it starts the engine): the tensor data must be
    all there, as llama.cpp will read it.

    A Hugging Face model folder (or its ``config.json``: what vLLM serves) is read by
    ``runner.model.hf_config`` into the same facts; it is never loaded by kvtop itself."""
    from kvtop.runner.model.hf_config import ConfigError, config_file, facts_from_config

    if config_file(path) is not None:
        if need_weights:
            raise ModelFileError(f"{path}: a Hugging Face model folder: kvtop runs GGUF files (attach to the "
                                 "vLLM that serves it with --server URL)")
        try:
            return facts_from_config(path)
        except ConfigError as exc:
            raise ModelFileError(str(exc)) from None
    try:
        header = read_header(path)
        if need_weights:
            check_loadable(header)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such file") from None
    except (OSError, GGUFFormatError) as exc:
        raise ModelFileError(f"{path}: {exc}") from None
    facts = facts_from_header(header)
    check_consistent(facts, header)
    if header.tensors and not header.has_tensor_data:
        facts.notes.append(
            f"tensor data missing or truncated ({header.file_size:,} of "
            f"{header.data_offset + header.tensor_data_bytes():,} bytes): estimate from the header only")
    return facts


def check_consistent(facts: ModelFacts, header: GGUFHeader) -> None:
    """Refuse metadata that contradicts the tensors (it would trip llama.cpp asserts)."""
    if facts.n_layers is None:
        return
    if facts.n_layers <= 0 or facts.n_layers > MAX_LAYERS:
        raise ModelFileError(f"{facts.path}: absurd block_count {facts.n_layers}")
    blocks = {int(m.group(1)) for t in header.tensors if (m := re.match(r"blk\.(\d+)\.", t.name))}
    if blocks and max(blocks) + 1 != facts.n_layers:
        raise ModelFileError(
            f"{facts.path}: block_count says {facts.n_layers} layers but the tensors "
            f"describe {max(blocks) + 1}"
        )
