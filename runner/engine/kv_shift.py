"""A context shift that keeps the cache: the dropped turns' cells are removed and the
cells after them moved back (llama.cpp's way: ``llama_memory_seq_rm`` then
``llama_memory_seq_add``; llama.cpp re-applies RoPE to the moved keys at the next
decode), so only the new message is prefilled.

Before, dropping turn 1 (30 tokens) at 3,075 of 4,096 cells broke the cached prefix
at token 24 and recomputed 3,044 tokens (1m50s on a busy 2-core machine).

Which cells: ``runner.policy.context_shift`` decides which turns the prompt leaves
out; here the new prompt is matched against the cached tokens: it shares a prefix
with them (the system prompt and ``--keep``'s turns), then continues with cached
tokens further on. The span between is cut (``cut_span``), pure Python.

Where a model's memory cannot do this, the turn falls back to recomputing from where
the prefix broke, and the chat line says why (``why_no_shift``): recurrent or hybrid
memory (a state, not cells: nothing can be cut from its middle), a sliding-window
cache smaller than the context (Gemma-3 without ``--swa-full``), M-RoPE positions,
or anything else llama.cpp says it cannot shift (``llama_memory_can_shift``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llama_cpp

if TYPE_CHECKING:
    from kvtop.runner.engine.prompt_cache import KVCache

MIN_KEPT = 8  # a shift that would keep fewer cached tokens than this after the cut is not worth it


def cut_span(cached: list[int], tokens: list[int]) -> tuple[int, int, int] | None:
    """``(p0, p1, kept)``: removing cached cells ``[p0, p1)`` lets the prompt ``tokens``
    reuse ``p0 + kept`` cached tokens (``kept`` of them from after the cut). None when no
    cut keeps at least ``MIN_KEPT`` tokens more than the plain prefix does.

    ``p0`` is where ``tokens`` leaves the cache; ``p1`` is the cached position from which
    the most tokens match the prompt's continuation (the first such, so the fewest cells
    go). The last prompt token is never counted as cached (its logits start the reply)."""
    limit = len(tokens) - 1
    p0 = 0
    while p0 < min(len(cached), limit) and cached[p0] == tokens[p0]:
        p0 += 1
    if p0 >= len(cached) or p0 >= limit:
        return None
    want, best = tokens[p0], None
    for p1 in range(p0 + 1, len(cached)):
        if cached[p1] != want:
            continue
        n = 0
        room = min(len(cached) - p1, limit - p0)
        while n < room and cached[p1 + n] == tokens[p0 + n]:
            n += 1
        if best is None or n > best[2]:
            best = (p0, p1, n)
            if p1 + n == len(cached):  # everything after the cut is kept: no better cut exists
                break
    return best if best is not None and best[2] >= MIN_KEPT else None


def why_no_shift(model: object, mem: object) -> str | None:  # llama_cpp's model and memory pointers
    """Why this model's memory cannot drop cells from its middle and move the rest
    (None: it can)."""
    lc = llama_cpp
    if lc.llama_model_is_recurrent(model) or lc.llama_model_is_hybrid(model):
        return "recurrent memory: a state, not cells, cannot lose turns from its middle"
    if lc.llama_memory_can_shift(mem):
        return None
    if lc.llama_model_rope_type(model) in (getattr(lc, "LLAMA_ROPE_TYPE_MROPE", 8),
                                           getattr(lc, "LLAMA_ROPE_TYPE_IMROPE", 40),
                                           getattr(lc, "LLAMA_ROPE_TYPE_VISION", 24)):
        return "M-RoPE positions cannot be shifted"
    if lc.llama_model_n_swa(model) > 0:
        return "sliding-window cache smaller than the context (--swa-full makes it shiftable)"
    return "llama.cpp cannot shift this model's cache"


def shift_out(mem: object, cached: list[int], p0: int, p1: int) -> list[int] | None:
    """Remove cells ``[p0, p1)`` of sequence 0 and move the cells after them back by
    ``p1 - p0`` positions; the cached tokens as they now are, or None when llama.cpp
    refused the removal (the caller then recomputes as without a shift)."""
    if not llama_cpp.llama_memory_seq_rm(mem, 0, p0, p1):
        return None
    llama_cpp.llama_memory_seq_add(mem, 0, p1, -1, -(p1 - p0))
    return cached[:p0] + cached[p1:]


def shift_for(kv: KVCache, tokens: list[int], no_shift: str | None) -> int:
    """Before a turn whose prompt left turns out: cut the cache to fit ``tokens`` (``kv``:
    ``runner.engine.prompt_cache.KVCache``). The cells removed (0: none, as without a shift)."""
    if no_shift is not None:
        return 0
    cut = cut_span(kv.tokens, tokens)
    if cut is None:
        return 0
    p0, p1, _ = cut
    kept = shift_out(kv.mem, kv.tokens, p0, p1)
    if kept is None:
        return 0
    kv.tokens = kept
    return p1 - p0


def cached_after_shift(cached: list[int], tokens: list[int], common: int, no_shift: str | None) -> int:
    """The tokens of ``tokens`` a turn would reuse once the cache is cut (the forecast
    before Enter asks, without cutting anything): ``common`` when it cannot shift."""
    if no_shift is not None:
        return common
    cut = cut_span(cached, tokens)
    return max(common, cut[0] + cut[2]) if cut is not None else common
