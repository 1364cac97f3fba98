"""Speculative decode: draft, verify the draft in one ``llama_decode``, keep what the
target agrees with. llama-server's loop (tools/server/server-context.cpp):

* the drafter sees the tokens in the cache and the token just sampled (not yet in it),
  and drafts at most ``n_ctx - cached - 2`` tokens, and one fewer than ``-n`` leaves;
* the sampled token and the draft go into one batch, every position with logits;
* ``common_sampler_sample_and_accept_n``: the target's sampler chain samples each
  position in turn (``llama_sampler_sample`` accepts what it samples, so the chain,
  penalties included, advances only by the tokens kept) and stops at the first token
  that differs from the draft (an end-of-generation token also stops it); when all
  match, it samples one more. At ``--temp 0`` the tokens are the plain decode's;
  sampling, it is the exact rule (sample the target, keep while it equals the draft);
* the rejected cells leave the cache (``llama_memory_seq_rm``).

What the turn's speculation is measured against: this machine's plain decode step,
timed on the turn's own plain steps (where nothing was drafted; the drafting attempt
not counted), else the last turn's; the engine's first speculative turn makes its
first step a plain one (no draft) so that there is always one.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import llama_cpp

from kvtop.runner import events as ev

if TYPE_CHECKING:
    from kvtop.runner.engine.decode import Decode, Decoded
    from kvtop.runner.engine.utf8_stream import Utf8Stream
    from kvtop.runner.policy.ngram import Speculator

AB_STEPS = 1  # plain steps at the start of the engine's first speculative turn, to time a plain step


class VerifyBatch:
    """A ``llama_batch`` of up to ``cap`` tokens of sequence 0, every one with logits
    (``llama_batch_get_one`` gives logits for the last token only)."""

    __slots__ = ("cap", "batch")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.batch: llama_cpp.llama_batch | None = llama_cpp.llama_batch_init(cap, 0, 1)

    def fill(self, tokens: list[int], pos0: int) -> llama_cpp.llama_batch:
        batch = self.batch
        if batch is None or len(tokens) > self.cap:
            raise ValueError("verify batch closed or too small")
        b: Any = batch  # its arrays are ctypes pointers, written in place
        for i, tok in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos0 + i, 1, 1
            b.seq_id[i][0] = 0
        b.n_tokens = len(tokens)
        return batch

    def close(self) -> None:
        b, self.batch = self.batch, None
        if b is not None:
            llama_cpp.llama_batch_free(b)


@dataclass(slots=True)
class SpecTally:
    """What speculation did in one turn (``TurnMetrics``' spec_* fields)."""

    drafted: int = 0
    accepted: int = 0
    passes: int = 0  # verify passes (a batch with a draft)
    plain_steps: int = 0  # one-token steps (no draft, or the A/B step)
    spec_tokens: int = 0  # tokens the steps after the A/B step produced
    spec_s: float = 0.0  # and the time they took, drafting included
    draft_s: float = 0.0  # of which drafting
    verify_s: float = 0.0  # of which verify passes (decode and sampling)
    per_pos: list[int] = field(default_factory=list)  # accepted at draft position i
    plain_s: list[float] = field(default_factory=list)  # each plain step's seconds, drafting not counted

    def count(self, drafted: int, accepted: int) -> None:
        """One verify pass of ``drafted`` tokens, ``accepted`` of them kept."""
        self.passes += 1
        self.drafted += drafted
        self.accepted += accepted
        self.per_pos.extend([0] * (drafted - len(self.per_pos)))
        for i in range(accepted):
            self.per_pos[i] += 1

    def fields(self, spec_type: str) -> dict[str, object]:
        return {"spec_type": spec_type, "spec_drafted": self.drafted, "spec_accepted": self.accepted,
                "spec_passes": self.passes, "spec_plain_steps": self.plain_steps,
                "spec_tokens": self.spec_tokens, "spec_s": self.spec_s, "spec_draft_s": self.draft_s,
                "spec_verify_s": self.verify_s, "spec_accepted_per_pos": tuple(self.per_pos),
                "spec_plain_step_s": statistics.median(self.plain_s) if self.plain_s else None}


class SpecLoop:
    """The decode loop with a drafter; ``Decode`` runs it in place of its plain loop."""

    def __init__(self, dec: Decode, spec: Speculator, cap: int, name: str,
                 on_close: Callable[[], None] | None = None) -> None:
        """``name``: the --spec-type; ``on_close``: frees what the drafters hold (a draft model)."""
        self.dec, self.spec, self.name, self._on_close = dec, spec, name, on_close
        self.vb = VerifyBatch(cap)
        self.tally = SpecTally()
        self.last_plain_s: float | None = None  # the last turn's plain step (median)

    def close(self) -> None:
        self.vb.close()
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    def n_draft_max(self, n_predict: int, n_out: int) -> int:
        n = min(self.dec.n_ctx - len(self.dec.kv.tokens) - 2, self.vb.cap - 1)
        if n_predict >= 0 and n_predict - n_out > 0:
            n = min(n, n_predict - n_out - 1)
        return n

    def run(self, smpl: object, stream: Utf8Stream, out: Decoded, turn_id: int, n_predict: int,
            ignore_eog: bool, cancel: threading.Event, emit: Callable[[object], None]) -> None:
        dec, spec, kv, tally = self.dec, self.spec, self.dec.kv, SpecTally()
        self.tally = tally
        ab_steps = AB_STEPS if self.last_plain_s is None else 0
        ctx, vocab_ptr, n_ctx = dec.ctx, dec.vocab.ptr, dec.n_ctx
        sample, is_eog, decode = llama_cpp.llama_sampler_sample, llama_cpp.llama_vocab_is_eog, llama_cpp.llama_decode
        monotonic, piece, feed = time.monotonic, dec.vocab.piece, stream.feed
        one, single = dec.one.arr, dec.one.single()
        assert one is not None

        def put(tok: int, at: int, now: float | None = None) -> str | None:
            """The plain loop's steps for a token at ``at``: its stop, if any. A verify pass's
            tokens carry its one time ``now`` (stamped one by one, they were 0.01-9 ms apart)."""
            if not ignore_eog and is_eog(vocab_ptr, tok):
                return "eog"
            now = monotonic() if now is None else now
            if out.t_first_token is None:
                out.t_first_token = now
            text = feed(piece(tok))
            if text and out.t_first_visible is None:
                out.t_first_visible = now
            out.token_times.append(now)
            out.text.append(text)
            emit(ev.TokenEvent(turn_id, out.n_out, tok, text, at, now))
            out.n_out += 1
            if n_predict >= 0 and out.n_out >= n_predict:
                return "n_predict"
            if at + 1 >= n_ctx:
                return "context_full"
            return "cancelled" if cancel.is_set() else None

        spec.begin(kv.tokens)
        pos, stop, step = out.pos, None, 0
        try:
            tok = sample(smpl, ctx, -1)
            stop = put(tok, pos)
            while stop is None:
                t0 = monotonic()
                draft = spec.draft(kv.tokens, tok, self.n_draft_max(n_predict, out.n_out)) if step >= ab_steps else []
                t1 = monotonic()
                n_before = out.n_out
                if not draft:
                    one[0] = tok
                    rc = decode(ctx, single)
                    if rc != 0:
                        stop = self._failed(rc, pos)
                        break
                    kv.tokens.append(tok)
                    pos += 1
                    tok = sample(smpl, ctx, -1)
                    tally.plain_steps += 1
                    tally.plain_s.append(monotonic() - t1)
                    stop = put(tok, pos)
                else:
                    rc = decode(ctx, self.vb.fill([tok] + draft, pos))
                    if rc != 0:
                        stop = self._failed(rc, pos)
                        break
                    kv.tokens += [tok, *draft]
                    accepted = _sample_and_accept_n(smpl, ctx, draft, vocab_ptr)
                    n_acc = len(accepted) - 1
                    spec.accept(n_acc)
                    tally.count(len(draft), n_acc)
                    keep, t_pass = pos + 1 + n_acc, monotonic()
                    for j, a in enumerate(accepted):
                        if (stop := put(a, pos + 1 + j, t_pass)) is not None:
                            keep = pos + 1 + j
                            break
                    kv.keep(keep)
                    pos, tok = keep, accepted[-1]
                    tally.verify_s += monotonic() - t1
                if step >= ab_steps:
                    tally.draft_s += t1 - t0
                    tally.spec_s += monotonic() - t0
                    tally.spec_tokens += out.n_out - n_before
                step += 1
        finally:
            out.stop, out.pos = stop, pos
            self._remember_plain(tally)

    def _failed(self, rc: int, pos: int) -> str:
        self.dec.kv.drop_from(pos)
        if rc == 1:
            return "context_full"
        raise RuntimeError(f"llama_decode failed ({rc}) during decode")

    def _remember_plain(self, tally: SpecTally) -> None:
        """This turn's plain steps time the next turn's too; a turn without one uses the last's."""
        if tally.plain_s:
            self.last_plain_s = statistics.median(tally.plain_s)
        elif self.last_plain_s is not None:
            tally.plain_s.append(self.last_plain_s)


def _sample_and_accept_n(smpl: object, ctx: object, draft: list[int], vocab_ptr: object) -> list[int]:
    """``common_sampler_sample_and_accept_n`` on batch indexes 0..len(draft)."""
    sample, is_eog = llama_cpp.llama_sampler_sample, llama_cpp.llama_vocab_is_eog
    out: list[int] = []
    k = len(draft)
    for i in range(k):
        tok = sample(smpl, ctx, i)
        out.append(tok)
        if tok != draft[i] or (is_eog(vocab_ptr, tok) and i + 1 < k):
            return out
    out.append(sample(smpl, ctx, k))
    return out

