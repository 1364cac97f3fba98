"""How fast the tokens of a ``--prompt-cache`` file were computed, kept beside it.

A restore spares the prefill of the cached tokens. To say how much time that was,
kvtop needs a rate measured over those tokens: the turn after a restore computes one
token (the last, for its logits), and one token's rate says nothing of 800 (it made
the "saved" figure 11 times too high). So the turn that saves the cache records its
prefill rate as ``FILE.kvtop.json``, with the cache file's size and
modification time: a cache replaced by another run or tool is not believed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvtop.runner.events import TurnMetrics

SUFFIX = ".kvtop.json"
MIN_SESSION_TOKENS = 64  # a turn's prefill counts toward this session's rate from this many tokens


class _Turn(Protocol):
    """A finished turn as the session keeps it (runner.session's TurnRecord)."""

    @property
    def metrics(self) -> TurnMetrics: ...


def rate_path(cache_path: str) -> str:
    return cache_path + SUFFIX


def write_rate(cache_path: str, tokens: int, tok_s: float) -> None:
    """Record that the ``tokens`` in the cache at ``cache_path`` were computed at
    ``tok_s`` tokens per second (call after the cache is written). Raises OSError."""
    st = os.stat(cache_path)
    data = {"tokens": int(tokens), "prefill_tok_s": float(tok_s), "cache_size": st.st_size,
            "cache_mtime_ns": st.st_mtime_ns}
    path = rate_path(cache_path)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def read_rate(cache_path: str, tokens: int) -> float | None:
    """Tokens per second at which the cache's ``tokens`` were computed, or None when no
    record matches this cache file and token count."""
    try:
        st = os.stat(cache_path)
        with open(rate_path(cache_path), encoding="utf-8") as fh:
            data = json.load(fh)
        n, rate = int(data["tokens"]), float(data["prefill_tok_s"])
        same_file = data["cache_size"] == st.st_size and data["cache_mtime_ns"] == st.st_mtime_ns
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not same_file or n != tokens or not 0 < rate < float("inf"):
        return None
    return rate


def session_rate(turns: Iterable[_Turn]) -> float | None:
    """This session's measured prefill rate: the turns that computed at least
    ``MIN_SESSION_TOKENS`` tokens, pooled (``turns``: TurnRecords)."""
    n = s = 0.0
    for t in turns:
        m = t.metrics
        if m.prefill_tokens >= MIN_SESSION_TOKENS and m.prefill_s > 0:
            n += m.prefill_tokens
            s += m.prefill_s
    return n / s if s > 0 else None


def saved_note(spared_tokens: int, cache_path: str, restored_tokens: int, turns: Iterable[_Turn]) -> str:
    """What a restore spared, for the prefill pane, saying which rate the figure uses."""
    rate = read_rate(cache_path, restored_tokens)
    source = "measured when the cache was saved"
    if rate is None:
        rate, source = session_rate(turns), "this session's prefill rate"
    if rate is None:
        return f"spared {spared_tokens:,} tokens of prefill (no prefill rate measured yet to time them)"
    return f"saved ≈ {spared_tokens / rate:.2f} s of prefill ({spared_tokens:,} tokens at {rate:,.0f} tok/s, {source})"
