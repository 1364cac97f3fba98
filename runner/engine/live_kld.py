"""The app's "measure quality of the KV cache": the chat on screen through a base cache
and each candidate, in scoring contexts of their own on the engine's loaded model
(runner.engine.scoring), by ``kvtop kld``'s formulas (runner.physics.kld).

The chat's own context, its KV cache and its cached token list are never touched: the
contexts here are created for the measurement and freed after it, so the next turn is
the turn it would have been. Which caches: a quantized running cache is measured against
f16/f16; a full-precision one is the base, and q8_0/q8_0 and q4_0/q4_0 are measured
against it (``live_pairs``).

The chat is one chunk: its tokens as the chat's prompt renders them (without a
generation prompt), at most the chat's context, every position that has a next token
scored (a chat is short; llama-perplexity's second-half rule would leave out half of
it). Slices of ``LIVE_UBATCH`` tokens go through every context in turn, their rows of
logits scored at once; between slices the cancel event (Esc) is checked and progress
reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from threading import Event
from typing import TYPE_CHECKING

import numpy as np

from kvtop.runner import events as ev
from kvtop.runner.engine.errors import EngineLoadError
from kvtop.runner.engine.load_params import apply_loras
from kvtop.runner.engine.scoring import ScoringContext, ScoringError
from kvtop.runner.physics.kld import NonFinite, Sums
from kvtop.runner.sanitize import clean_line

if TYPE_CHECKING:
    from kvtop.runner.engine.engine import Engine
    from kvtop.runner.settings import Settings

Pair = tuple[str, str]
FULL_PRECISION = ("f16", "f32", "bf16")
TRIALS: tuple[Pair, ...] = (("q8_0", "q8_0"), ("q4_0", "q4_0"))  # measured against a full-precision cache
MIN_TOKENS = 16  # fewer positions say nothing
LIVE_UBATCH = 256  # tokens a slice: bounds the logits held (a slice's rows per context)
Emit = Callable[[object], None]


def live_pairs(type_k: str, type_v: str) -> tuple[Pair, tuple[Pair, ...]]:
    """(base, candidates) for a chat running with ``type_k``/``type_v``."""
    if type_k in FULL_PRECISION and type_v in FULL_PRECISION:
        return (type_k, type_v), tuple(p for p in TRIALS if p != (type_k, type_v))
    return ("f16", "f16"), ((type_k, type_v),)


def chat_tokens(engine: Engine, messages: list[dict[str, str]]) -> list[int]:
    """The chat's tokens as its prompt renders them, without the generation prompt."""
    return engine._prompt_tokens(engine.render(messages, add_generation_prompt=False).text)


def _side(engine: Engine, pair: Pair, n: int) -> ScoringContext:
    s: Settings = engine.settings
    s = replace(s, cache_type_k=pair[0], cache_type_v=pair[1], n_ubatch=min(s.n_ubatch, LIVE_UBATCH),
                n_batch=min(s.n_ubatch, LIVE_UBATCH))
    side = ScoringContext(engine._parts()[0], s, n)
    if (why := apply_loras(side.model, side.ctx, s.lora)) is not None:  # --lora: the chat's model, adapters and all
        side.close()
        raise EngineLoadError(why)
    return side


def measure_chat(engine: Engine, turn_id: int, messages: list[dict[str, str]], emit: Emit,
                 cancel: Event) -> ev.KldMeasured:
    """Measure the chat of ``messages`` (``MeasureKld``): ``KldProgress`` per slice, then
    the ``KldMeasured`` (returned too)."""
    t0 = time.monotonic()
    s = engine.settings
    base_pair, cand_pairs = live_pairs(s.cache_type_k, s.cache_type_v)
    all_tokens = chat_tokens(engine, messages)
    tokens = all_tokens[:engine.n_ctx]
    n = len(tokens)

    def done(pairs: tuple[ev.KldPair, ...], stopped: str | None) -> ev.KldMeasured:
        out = ev.KldMeasured(turn_id, n, len(all_tokens), base_pair[0], base_pair[1], pairs,
                             time.monotonic() - t0, stopped, time.monotonic())
        emit(out)
        return out

    if n < MIN_TOKENS:
        return done((), f"the chat has {n:,} tokens: the measurement needs at least {MIN_TOKENS} (send a message first)")
    # the chat's size before its first slice: a chat under a slice reported only at its end (ETA "-" throughout)
    emit(ev.KldProgress(turn_id, 0, n, time.monotonic() - t0, time.monotonic()))
    sides: list[ScoringContext] = []
    errors: dict[Pair, str] = {}
    try:
        try:
            sides.append(_side(engine, base_pair, n))
        except EngineLoadError as exc:
            return done((), f"the base cache {base_pair[0]}/{base_pair[1]}: {exc}")
        live: list[Pair] = []
        for pair in cand_pairs:
            try:
                sides.append(_side(engine, pair, n))
                live.append(pair)
            except EngineLoadError as exc:  # llama.cpp's reason, e.g. a quantized V cache without flash attention
                errors[pair] = clean_line(str(exc))
        sums = [Sums() for _ in live]
        stopped = _run(sides, tokens, sums, live, turn_id, emit, cancel, t0) if live else None
    finally:
        for side in sides:
            side.close()
    pairs = tuple(_pair(p, sums[live.index(p)]) if p in live else ev.KldPair(p[0], p[1], error=errors[p])
                  for p in cand_pairs)
    return done(pairs, stopped)


def _pair(p: Pair, s: Sums) -> ev.KldPair:
    if not s.count:
        return ev.KldPair(p[0], p[1], error="nothing was scored")
    st = s.stats(chunks=1)
    return ev.KldPair(p[0], p[1], st.count, st.kld_mean, st.kld_percentiles["99.0%"], st.same_top, st.rms_p_diff)


def _run(sides: list[ScoringContext], tokens: list[int], sums: list[Sums], live: list[Pair], turn_id: int,
         emit: Emit, cancel: Event, t0: float) -> str | None:
    """Every slice through every side; None when complete, else why it stopped."""
    n = len(tokens)
    base = sides[0]
    for start, size in base.slices(n):
        if cancel.is_set():
            return "cancelled"
        try:
            rows = [side.decode(tokens[start:start + size], start, 0) for side in sides]
        except ScoringError as exc:
            return str(exc)
        keep = min(start + size, n - 1) - start  # the last position predicts nothing in the chat
        if keep > 0 and all(r is not None for r in rows):
            targets = np.asarray(tokens[start + 1:start + 1 + keep], dtype=np.int64)
            for k, s in enumerate(sums):
                b, c = rows[0], rows[k + 1]
                assert b is not None and c is not None
                try:
                    s.add(b[:keep], c[:keep], targets)
                except NonFinite as exc:
                    which = "base" if exc.which == "base" else f"{live[k][0]}/{live[k][1]}"
                    return (f"the {which} cache's logits are NaN or infinite at position {start + exc.row:,} "
                            f"of the chat: stopped")
        emit(ev.KldProgress(turn_id, start + size, n, time.monotonic() - t0, time.monotonic()))
    return None
