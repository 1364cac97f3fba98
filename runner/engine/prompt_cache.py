"""What is in the KV cache, and the ``--prompt-cache`` file that carries it across runs.

``KVCache`` mirrors llama.cpp's memory for sequence 0 as the list of tokens whose
KV is stored, in order. A new prompt keeps the prefix it shares with that list
(``common_prefix``) and the rest is removed with ``llama_memory_seq_rm``; a cache
that cannot cut in the middle (recurrent models) is cleared instead.

``PromptCacheFile`` restores llama.cpp's sequence state file once, before the first
turn, and saves it once, after the first complete prefill.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable

import llama_cpp

from kvtop.runner import events as ev
from kvtop.runner.sanitize import clean_line

DIFF_WINDOW = 8  # tokens shown either side of where a prompt left the cache


def common_prefix(cached: list[int], tokens: list[int]) -> int:
    """How many leading tokens of ``tokens`` are already cached. At least one prompt
    token is always left to compute, so there are logits to sample from."""
    common = 0
    limit = min(len(cached), len(tokens) - 1)
    while common < limit and cached[common] == tokens[common]:
        common += 1
    return common


def first_difference(cached: list[int], common: int) -> int | None:
    """Where the prompt left the cached tokens, or None when it kept all of them."""
    return common if common < len(cached) else None


def diff_windows(cached: list[int], tokens: list[int], at: int) -> tuple[list[int], list[int]]:
    """The cached and the new tokens around index ``at``, for showing the change."""
    lo, hi = max(0, at - DIFF_WINDOW), at + DIFF_WINDOW
    return cached[lo:hi], tokens[lo:hi]


class KVCache:
    """The tokens in sequence 0 of a context's memory (``mem``: borrowed pointer)."""

    __slots__ = ("mem", "tokens")

    def __init__(self, mem: object = None) -> None:  # llama_memory_t, as llama_cpp returns it
        self.mem = mem
        self.tokens: list[int] = []

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.mem, True)
        self.tokens = []

    def keep(self, n: int) -> None:
        """Keep the first ``n`` cached tokens and drop the rest (nothing to do when
        ``n`` covers them all)."""
        if n < len(self.tokens):
            self.drop_from(n)

    def drop_from(self, n: int) -> None:
        """Remove every cell from position ``n`` on, even cells the token list does
        not know of (a failed ``llama_decode`` may have written part of a batch)."""
        if not llama_cpp.llama_memory_seq_rm(self.mem, 0, n, -1):
            llama_cpp.llama_memory_clear(self.mem, True)  # recurrent: start over
            n = 0
        self.tokens = self.tokens[:n]

    def cells_used(self) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self.mem, 0)) + 1


class PromptCacheFile:
    """``--prompt-cache PATH``: one restore before the first turn, one save after the
    first prefill that completes; ``done`` once either has happened."""

    __slots__ = ("path", "done")

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.done = False

    def wants_restore(self, kv: KVCache) -> bool:
        return bool(self.path) and not self.done and not kv.tokens

    def wants_save(self, stop: str | None) -> bool:
        return bool(self.path) and not self.done and stop is None

    def restore(self, ctx: object, kv: KVCache, n_ctx: int, emit: Callable[[object], None]) -> None:
        """Load the file into the cache, if it exists (``ctx``: context pointer)."""
        path = self.path
        if path is None or not os.path.isfile(path):
            return
        t0 = time.monotonic()
        toks = (ctypes.c_int32 * n_ctx)()
        n = ctypes.c_size_t(0)
        size = llama_cpp.llama_state_seq_load_file(ctx, os.fsencode(path), 0, toks, n_ctx, ctypes.byref(n))
        self.done = True
        if size == 0 or n.value == 0:
            llama_cpp.llama_memory_clear(kv.mem, True)
            emit(ev.EngineWarning(f"prompt cache {clean_line(path)} could not be restored (other model or settings?)"))
            return
        kv.tokens = list(toks[: n.value])
        emit(ev.PromptCache("restored", path, n.value, int(size), time.monotonic() - t0))

    def save(self, ctx: object, kv: KVCache, emit: Callable[[object], None]) -> None:
        path = self.path
        if path is None:  # wants_save() said no
            return
        self.done = True
        t0 = time.monotonic()
        arr = (ctypes.c_int32 * len(kv.tokens))(*kv.tokens)
        size = llama_cpp.llama_state_seq_save_file(ctx, os.fsencode(path), 0, arr, len(kv.tokens))
        if size:
            emit(ev.PromptCache("saved", path, len(kv.tokens), int(size), time.monotonic() - t0))
