"""A context shift that keeps the cache (runner.engine.kv_shift): which cells go, that the
cells moved back give the model what a fresh prefill of the same tokens gives it, and
that a model that cannot shift falls back to recomputing, saying why."""

import llama_cpp
import pytest

from runner import events as ev
from runner.engine.context_shift import shift_line
from runner.engine.handles import TokenBuffer
from runner.engine.kv_shift import MIN_KEPT, cached_after_shift, cut_span, shift_out, why_no_shift


def test_the_cut_is_the_dropped_span_and_keeps_the_rest():
    head, dropped, kept, reply = [1, 2, 3], list(range(100, 130)), list(range(200, 260)), [7, 8]
    cached = head + dropped + kept + reply
    prompt = head + kept + [9, 9, 9]  # the new message after the kept turns
    assert cut_span(cached, prompt) == (3, 33, len(kept))
    assert cached_after_shift(cached, prompt, 3, None) == 3 + len(kept)
    assert cached_after_shift(cached, prompt, 3, "recurrent memory") == 3  # cannot shift: the plain prefix


def test_no_cut_when_nothing_after_it_would_be_kept():
    cached = [1, 2, 3] + list(range(100, 140))
    assert cut_span(cached, [1, 2, 3, 50, 51, 52]) is None  # the rest is new
    assert cut_span(cached, cached + [5]) is None  # nothing dropped: the plain prefix holds it all
    short = [1, 2] + [100] + list(range(300, 300 + MIN_KEPT - 1))
    assert cut_span([1, 2, 99] + short[2:], [1, 2] + short[3:] + [0]) is None  # fewer than MIN_KEPT kept


def _logits(ctx, n_vocab: int) -> list[float]:
    ptr = llama_cpp.llama_get_logits_ith(ctx.ptr, -1)
    return [ptr[i] for i in range(n_vocab)]


def test_moved_cells_give_what_a_fresh_prefill_gives(tiny_model):
    """RoPE is re-applied to the moved keys: the next token's logits after the cut match
    those of a prefill of the same tokens from scratch (to float rounding)."""
    model, ctx = tiny_model
    assert why_no_shift(model.ptr, ctx.mem) is None  # a plain llama: it can
    n_vocab = model.vocab.n_tokens()
    a, b, c, x = list(range(300, 320)), list(range(400, 440)), list(range(500, 530)), [42]
    mem = ctx.mem
    llama_cpp.llama_memory_clear(mem, True)
    for part in (a, b, c):
        with TokenBuffer(part) as buf:
            for i in range(0, len(part), 16):
                assert llama_cpp.llama_decode(ctx.ptr, buf.batch(i, min(16, len(part) - i))) == 0
    kept = shift_out(mem, a + b + c, len(a), len(a) + len(b))
    assert kept == a + c and llama_cpp.llama_memory_seq_pos_max(mem, 0) == len(a + c) - 1
    with TokenBuffer(x) as buf:
        assert llama_cpp.llama_decode(ctx.ptr, buf.batch(0, 1)) == 0
    shifted = _logits(ctx, n_vocab)
    llama_cpp.llama_memory_clear(mem, True)
    fresh_tokens = a + c + x
    with TokenBuffer(fresh_tokens) as buf:
        for i in range(0, len(fresh_tokens), 16):
            assert llama_cpp.llama_decode(ctx.ptr, buf.batch(i, min(16, len(fresh_tokens) - i))) == 0
    fresh = _logits(ctx, n_vocab)
    llama_cpp.llama_memory_clear(mem, True)
    scale = max(abs(v) for v in fresh) or 1.0
    assert max(abs(p - q) for p, q in zip(shifted, fresh)) < 1e-2 * scale
    assert shifted.index(max(shifted)) == fresh.index(max(fresh))


def test_the_chat_line_says_the_cost_either_way():
    base = dict(turn_id=3, dropped_turns=(1, 2), dropped_tokens=412, kept_tokens=20, prompt_tokens=900,
                reused_tokens=870, prefix_broken_at=None, n_ctx=1024, t=0.0)
    line = shift_line(ev.ContextShifted(**base, shifted_cells=412))
    assert line == ("context full: dropped turns 1–2 (412 tokens) by shifting the cache: nothing recomputed, "
                    "computing 30 new tokens")
    why = "sliding-window cache smaller than the context (--swa-full makes it shiftable)"
    fell = shift_line(ev.ContextShifted(**{**base, "reused_tokens": 20, "prefix_broken_at": 20}, no_shift=why))
    assert fell == (f"context full: dropped turns 1–2 (412 tokens); the cache cannot shift ({why}); "
                    "cache prefix broke at token 20, recomputing 880 tokens")


def test_an_engine_that_cannot_shift_recomputes_and_says_why(tiny_llama):
    """The fallback path on the real engine (the tiny llama can shift: told it cannot)."""
    from runner.engine.engine import Engine
    from runner.settings import Settings

    seen: list = []
    s = Settings(tiny_llama, n_ctx=256, n_threads=1, n_batch=64, n_ubatch=64, n_predict=16, temp=0.0, seed=1)
    engine = Engine(s, seen.append)
    engine.load()
    engine._no_shift = "recurrent memory: a state, not cells, cannot lose turns from its middle"
    try:
        msgs = []
        for i in range(8):
            msgs.append({"role": "user", "content": f"turn {i} " + " ".join(f"fact {i}.{k}" for k in range(12))})
            engine.chat(list(msgs), turn_id=i + 1)
            msgs.append({"role": "assistant", "content": "noted"})
            if any(isinstance(e, ev.ContextShifted) for e in seen):
                break
    finally:
        engine.close()
    shift = next(e for e in seen if isinstance(e, ev.ContextShifted))
    assert shift.shifted_cells == 0 and shift.no_shift.startswith("recurrent memory")
    assert shift.reused_tokens == shift.kept_tokens  # recomputed from where the prefix broke, as before
    assert "the cache cannot shift (recurrent memory" in shift_line(shift)
