"""The prefill and decode units on the real tiny model, without the engine."""

import threading

import llama_cpp
import pytest

from kvtop.runner import events as ev
from kvtop.runner.engine.decode import Decode, Sampling
from kvtop.runner.engine.handles import TokenBuffer
from kvtop.runner.engine.prefill import Prefill

GREEDY = Sampling(temp=0.0, top_k=40, top_p=0.95, seed=0)


def test_prefill_one_decode_per_ubatch_with_progress(tiny_model, kv):
    _, ctx = tiny_model
    tokens = list(range(300, 350))
    seen = []
    cancel = threading.Event()
    pf = Prefill().run(ctx.ptr, kv, tokens, 0, 7, cancel, seen.append)
    assert pf.stop is None and pf.done == 50
    assert [n for n, _ in pf.ubatches] == [16, 16, 16, 2]
    assert kv.tokens == tokens and kv.cells_used() == 50
    assert [(e.turn_id, e.done, e.total, e.ubatch_tokens) for e in seen] == [
        (7, 16, 50, 16), (7, 32, 50, 16), (7, 48, 50, 16), (7, 50, 50, 2)]
    assert [e.t for e in seen] == pf.ubatch_ends
    assert pf.t_start <= pf.ubatch_ends[0] and pf.t_start + pf.seconds >= pf.ubatch_ends[-1]
    with_reuse = []
    pf2 = Prefill().run(ctx.ptr, kv, tokens + [1, 2, 3], 50, 8, cancel, with_reuse.append)
    assert pf2.done == 3 and [(e.done, e.total, e.reused) for e in with_reuse] == [(53, 53, 50)]
    # the abort callback is removed after the prefill: a decode step no longer asks it
    cancel.set()
    with TokenBuffer([4]) as one:
        assert llama_cpp.llama_decode(ctx.ptr, one.batch(0, 1)) == 0


def test_prefill_cancelled_before_it_starts(tiny_model, kv):
    _, ctx = tiny_model
    cancel = threading.Event()
    cancel.set()
    seen = []
    pf = Prefill().run(ctx.ptr, kv, list(range(300, 340)), 0, 1, cancel, seen.append)
    assert pf.stop == "cancelled" and pf.done == 0 and seen == [] and kv.tokens == []


def test_prefill_cancelled_between_ubatches(tiny_model, kv):
    _, ctx = tiny_model
    cancel = threading.Event()

    def emit(e):
        if e.done >= 32:
            cancel.set()

    pf = Prefill().run(ctx.ptr, kv, list(range(300, 360)), 0, 1, cancel, emit)
    assert pf.stop == "cancelled" and pf.done == 32 and len(kv.tokens) == 32 and kv.cells_used() == 32


def _decode(model, ctx, kv, **kw):
    args = dict(turn_id=3, n_predict=6, ignore_eog=True, stop=None, sampling=GREEDY,
                cancel=threading.Event(), emit=lambda e: None)
    args.update(kw)
    return Decode(ctx.ptr, model.vocab, kv, ctx.n_ctx()).run(**args)


def test_decode_streams_tokens_and_feeds_them_back(tiny_model, kv):
    model, ctx = tiny_model
    Prefill().run(ctx.ptr, kv, list(range(300, 320)), 0, 3, threading.Event(), lambda e: None)
    seen = []
    dec = _decode(model, ctx, kv, emit=seen.append)
    toks = [e for e in seen if e.token_id >= 0]
    assert dec.stop == "n_predict" and dec.n_out == 6 == len(toks)
    assert [e.index for e in toks] == list(range(6)) and [e.pos for e in toks] == list(range(20, 26))
    assert kv.tokens[20:] == [e.token_id for e in toks[:5]]  # the last one is not fed back
    assert dec.pos == 25 == len(kv.tokens) == kv.cells_used()
    assert dec.token_times == [e.t for e in toks] and dec.t_first_token == toks[0].t
    assert "".join(dec.text) == "".join(e.text for e in seen)
    visible = [e.t for e in seen if e.text]
    assert dec.t_first_visible == (visible[0] if visible else None)
    again = _decode(model, ctx, kv, n_predict=6)  # greedy: the same chain decides the same way
    assert again.n_out == 6


def test_decode_after_a_cancelled_prefill_generates_nothing(tiny_model, kv):
    model, ctx = tiny_model
    seen = []
    dec = _decode(model, ctx, kv, stop="cancelled", emit=seen.append)
    assert dec.stop == "cancelled" and dec.n_out == 0 and seen == [] and dec.token_times == []


def test_decode_stops_when_cancelled_and_at_the_context_end(tiny_model, kv):
    model, ctx = tiny_model
    Prefill().run(ctx.ptr, kv, list(range(300, 310)), 0, 3, threading.Event(), lambda e: None)
    cancel = threading.Event()

    def emit(e):
        if isinstance(e, ev.TokenEvent) and e.index == 2:
            cancel.set()

    dec = _decode(model, ctx, kv, n_predict=-1, cancel=cancel, emit=emit)
    assert dec.stop == "cancelled" and dec.n_out == 3 and dec.pos == 12
    kv.clear()
    Prefill().run(ctx.ptr, kv, list(range(300, 550)), 0, 3, threading.Event(), lambda e: None)
    dec = _decode(model, ctx, kv, n_predict=-1)
    assert dec.stop == "context_full" and dec.pos == 255 and dec.n_out == 6
    assert llama_cpp.llama_memory_seq_pos_max(ctx.mem, 0) + 1 == 255


class _CancelInsideUbatch:
    """A cancel flag that the loop's check between ubatches reads as clear once more
    after it is armed, so only llama.cpp's abort callback sees it set."""

    def __init__(self):
        self.armed_calls = None

    def arm(self):
        self.armed_calls = 0

    def is_set(self):
        if self.armed_calls is None:
            return False
        self.armed_calls += 1
        return self.armed_calls > 1


def test_prefill_aborted_inside_a_ubatch_drops_its_cells(tiny_model, kv):
    _, ctx = tiny_model
    cancel = _CancelInsideUbatch()

    def emit(e):
        if e.done == 16:
            cancel.arm()

    pf = Prefill().run(ctx.ptr, kv, list(range(300, 348)), 0, 1, cancel, emit)
    assert cancel.armed_calls > 1, "llama.cpp never asked the abort callback"
    assert pf.stop == "cancelled" and pf.done == 16 and len(pf.ubatches) == 1
    assert len(kv.tokens) == 16 and kv.cells_used() == 16


def test_a_grammar_holds_the_reply_and_the_penalties_do_not_feed_it_the_prompt(tiny_model, kv):
    """--grammar/--json-schema: the real chain on the tiny model's vocabulary (random
    weights: without the grammar the reply is anything)."""
    model, ctx = tiny_model
    Prefill().run(ctx.ptr, kv, list(range(300, 320)), 0, 3, threading.Event(), lambda e: None)
    digits = Sampling(temp=0.0, top_k=40, top_p=0.95, seed=0, repeat_penalty=1.3, repeat_last_n=64,
                      more=(("grammar", "root ::= [0-9]+"),))
    dec = _decode(model, ctx, kv, sampling=digits, n_predict=6)
    text = "".join(dec.text)
    assert dec.n_out == 6 and text and text.isdigit(), text
    bad = Sampling(temp=0.0, top_k=40, top_p=0.95, seed=0, more=(("grammar", "root ::= ("),))
    with pytest.raises(RuntimeError, match="could not parse the grammar"):
        _decode(model, ctx, kv, sampling=bad)
