"""Decode: sample a token, stream its text, feed it back, until a stop condition.

Sampling runs in llama.cpp's sampler chain (``llama_sampler_sample`` reads the
logits in place: no copy per token). Text goes through an incremental UTF-8
decoder so that a character split across tokens is emitted whole; whatever it
holds is flushed on every stop path (end, -n, context full, cancel, error).

This loop is the hot path: everything it calls per token is bound to a local
before it starts, and the one-token batch is built once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import llama_cpp

from kvtop.runner import events as ev
from kvtop.runner.engine.handles import SamplerChain, TokenBuffer, Vocab
from kvtop.runner.engine.prompt_cache import KVCache
from kvtop.runner.engine.utf8_stream import Utf8Stream

if TYPE_CHECKING:
    from kvtop.runner.engine.speculative import SpecLoop
    from kvtop.runner.settings import Settings


@dataclass(slots=True)
class Decoded:
    """What one decode did; the timestamps are ``time.monotonic()``."""

    stop: str | None  # "eog", "n_predict", "context_full", "cancelled"; None if it never ran
    n_out: int = 0  # tokens generated
    pos: int = 0  # KV position after the last token fed back
    text: list[str] = field(default_factory=list)  # the text deltas, in order
    token_times: list[float] = field(default_factory=list)  # when each token was sampled
    t_first_token: float | None = None
    t_first_visible: float | None = None  # the first non-empty text delta
    spec: dict[str, object] = field(default_factory=dict)  # TurnMetrics' spec_* fields, when it speculated


MORE = ("typical_p", "top_n_sigma", "xtc_probability", "xtc_threshold", "mirostat", "mirostat_lr", "mirostat_ent",
        "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "grammar")


@dataclass(frozen=True, slots=True)
class Sampling:
    temp: float
    top_k: int
    top_p: float
    seed: int
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    more: tuple[tuple[str, Any], ...] = ()  # (name, value) of SamplerChain.build's keyword samplers: typical_p, xtc_..., mirostat...

    @classmethod
    def of(cls, s: Settings) -> Sampling:
        """The sampler settings of ``runner.settings.Settings``."""
        more = tuple((k, getattr(s, k)) for k in MORE)
        return cls(s.temp, s.top_k, s.top_p, s.seed, s.min_p, s.repeat_penalty, s.repeat_last_n,
                   s.presence_penalty, s.frequency_penalty, more)

    @property
    def penalties(self) -> bool:
        """Whether llama.cpp's penalties sampler would change anything."""
        if dict(self.more).get("mirostat"):  # mirostat's chain has no penalties (as llama.cpp's)
            return False
        return self.repeat_last_n != 0 and (self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0
                                            or self.presence_penalty != 0.0)

    @property
    def dry(self) -> bool:
        """Whether llama.cpp's DRY sampler is in the chain (after the penalties)."""
        m = dict(self.more)
        return (not m.get("mirostat") and m.get("dry_multiplier", 0.0) != 0.0 and m.get("dry_base", 1.75) >= 1.0
                and m.get("dry_penalty_last_n", 64) != 0)

    @property
    def dry_last_n(self) -> int:
        """The prompt tokens DRY sees: its window (its ring buffer keeps no more)."""
        return int(dict(self.more).get("dry_penalty_last_n", 64))

    def chain(self, n_vocab: int, vocab: object = None, suppress: tuple[int, ...] = ()) -> SamplerChain:
        """``vocab``: the model's vocabulary pointer, which a grammar needs; ``suppress``:
        tokens never sampled (the chain's first stage, a -inf logit bias)."""
        return SamplerChain.build(self.temp, self.top_k, self.top_p, self.seed, self.min_p, n_vocab,
                                  self.repeat_last_n, self.repeat_penalty, self.frequency_penalty,
                                  self.presence_penalty, vocab=vocab, suppress=suppress, **dict(self.more))


class Decode:
    """Runs decodes for one engine on one context; owns the reused one-token batch."""

    def __init__(self, ctx: object, vocab: Vocab, kv: KVCache, n_ctx: int,
                 spec: Callable[[Decode], SpecLoop | None] | None = None) -> None:
        """``spec``: makes the speculative loop (runner/engine/speculative.py) for this decode."""
        self.ctx = ctx  # context pointer
        self.vocab = vocab
        self.kv = kv
        self.n_ctx = n_ctx
        self.one = TokenBuffer([0])
        self.spec = spec(self) if spec is not None else None
        self._eog: tuple[int, ...] | None = None

    def eog_tokens(self) -> tuple[int, ...]:
        """What ``ignore_eog`` suppresses, as llama.cpp's ``--ignore-eos`` (common/common.cpp):
        every end-of-generation token, none when the vocabulary has no EOS (llama.cpp then
        ignores the flag). Found once (a pass over the vocabulary)."""
        if self._eog is None:
            v, is_eog = self.vocab.ptr, llama_cpp.llama_vocab_is_eog
            none = self.vocab.eos() < 0
            self._eog = () if none else tuple(t for t in range(self.vocab.n_tokens()) if is_eog(v, t))
        return self._eog

    def close(self) -> None:
        if self.spec is not None:
            self.spec.close()
            self.spec = None

    def run(self, turn_id: int, n_predict: int, ignore_eog: bool, stop: str | None, sampling: Sampling,
            cancel: threading.Event, emit: Callable[[object], None]) -> Decoded:
        """Generate up to ``n_predict`` tokens (< 0: no limit) after a prefill that
        ended with ``stop`` (nothing is generated unless it is None). A llama.cpp
        failure other than a full context raises ``RuntimeError``, after the text
        held back is emitted."""
        stream = Utf8Stream()
        out = Decoded(stop)
        suppress = self.eog_tokens() if ignore_eog and stop is None else ()
        chain = sampling.chain(self.vocab.n_tokens(), self.vocab.ptr, suppress) if stop is None else None
        if chain is not None:
            # as llama-server does: the penalties and DRY also see the prompt's tokens, so a
            # reply does not repeat the question word for word; only those stages (the
            # chain's first ones after the bias): a grammar starts at the reply
            accept, stage = llama_cpp.llama_sampler_accept, 1 if suppress else 0
            for on, last_n in ((sampling.penalties, sampling.repeat_last_n), (sampling.dry, sampling.dry_last_n)):
                if on:
                    smpl = llama_cpp.llama_sampler_chain_get(chain.ptr, stage)
                    for tok in self.kv.tokens[-last_n:]:
                        accept(smpl, tok)
                    stage += 1
        out.pos = len(self.kv.tokens)
        try:
            if chain is not None and self.spec is not None:
                try:
                    self.spec.run(chain.ptr, stream, out, turn_id, n_predict, ignore_eog, cancel, emit)
                finally:
                    out.spec = self.spec.tally.fields(self.spec.name)
            elif chain is not None:
                self._loop(chain.ptr, stream, out, turn_id, n_predict, ignore_eog, cancel, emit)
        finally:
            if chain is not None:
                chain.close()
            tail = stream.flush()
            if tail:
                out.text.append(tail)
                now = time.monotonic()
                if out.t_first_visible is None:
                    out.t_first_visible = now
                emit(ev.TokenEvent(turn_id, out.n_out, -1, tail, out.pos, now))
        return out

    def _loop(self, smpl: object, stream: Utf8Stream, out: Decoded, turn_id: int, n_predict: int,
              ignore_eog: bool, cancel: threading.Event, emit: Callable[[object], None]) -> None:
        # Per token: locals only (no attribute or global lookups, no batch built).
        ctx, vocab_ptr, n_ctx = self.ctx, self.vocab.ptr, self.n_ctx
        sample, is_eog, decode = llama_cpp.llama_sampler_sample, llama_cpp.llama_vocab_is_eog, llama_cpp.llama_decode
        monotonic, piece, feed, is_cancelled = time.monotonic, self.vocab.piece, stream.feed, cancel.is_set
        one, batch = self.one.arr, self.one.single()
        assert one is not None  # single() raised if the buffer was closed
        append_time, append_text, cache = out.token_times.append, out.text.append, self.kv.tokens.append
        TokenEvent = ev.TokenEvent
        pos, n_out, t_first_token, t_first_visible = out.pos, 0, None, None
        stop = None
        try:
            while True:
                tok = sample(smpl, ctx, -1)
                if not ignore_eog and is_eog(vocab_ptr, tok):
                    stop = "eog"
                    break
                now = monotonic()
                if t_first_token is None:
                    t_first_token = now
                text = feed(piece(tok))
                if text and t_first_visible is None:
                    t_first_visible = now
                append_time(now)
                append_text(text)
                emit(TokenEvent(turn_id, n_out, tok, text, pos, now))
                n_out += 1
                if n_predict >= 0 and n_out >= n_predict:
                    stop = "n_predict"
                    break
                if pos + 1 >= n_ctx:
                    stop = "context_full"
                    break
                if is_cancelled():
                    stop = "cancelled"
                    break
                one[0] = tok
                rc = decode(ctx, batch)
                if rc != 0:
                    self.kv.drop_from(pos)
                    if rc == 1:
                        stop = "context_full"
                        break
                    raise RuntimeError(f"llama_decode failed ({rc}) during decode")
                cache(tok)
                pos += 1
        finally:
            out.stop, out.pos, out.n_out = stop, pos, n_out
            out.t_first_token, out.t_first_visible = t_first_token, t_first_visible
