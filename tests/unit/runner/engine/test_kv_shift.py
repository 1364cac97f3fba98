"""A context shift that keeps the cache (runner.engine.kv_shift), without a model: which
cells go, and what the chat line says either way. On a model (the moved cells give what a
fresh prefill gives; the fallback on the engine): tests/e2e/test_kv_shift_on_a_model.py."""

from kvtop.runner import events as ev
from kvtop.runner.engine.kv_shift import MIN_KEPT, cached_after_shift, cut_span
from kvtop.runner.policy.context_shift import shift_line


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
