"""A full context on the real engine (tiny random-weight llama, SmolLM2's template): with
--context-shift the oldest whole turns leave the prompt and the turn runs, the event says
which, and the KV cache keeps exactly the prefix the shifted prompt shares with it; with
--no-context-shift the turn is refused as before."""

import pytest

from kvtop.runner import events as ev
from kvtop.runner.engine.engine import Engine
from kvtop.runner.policy.context_shift import fit_turns, split_turns, turn_ranges
from kvtop.runner.settings import Settings

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
REPLY = "Sure. " + " ".join(f"point {i} is noted" for i in range(6))


def _user(i: int) -> dict:
    # distinct first words: where turn 1 and turn 2 differ is where their text starts
    return {"role": "user", "content": f"{WORDS[i]} " + " ".join(f"fact {i}.{k} matters" for k in range(7))}


def _chat(engine: Engine, seen: list, turns: int) -> list:
    """``turns`` turns, each user message then a fixed reply; the result of each."""
    msgs, results = [], []
    for i in range(turns):
        msgs.append(_user(i))
        results.append(engine.chat(list(msgs), turn_id=i + 1))
        if isinstance(results[-1], ev.TurnRefused):
            msgs.pop()
        else:
            msgs.append({"role": "assistant", "content": REPLY})
    return results


def _engine(tiny_llama, seen, **kw) -> Engine:
    s = Settings(tiny_llama, n_ctx=256, n_threads=1, n_batch=64, n_ubatch=64, n_predict=16, temp=0.0, seed=1, **kw)
    engine = Engine(s, seen.append)
    engine.load()
    return engine


def _of_turn(seen, cls, turn_id):
    return [e for e in seen if isinstance(e, cls) and e.turn_id == turn_id]


def test_a_full_context_drops_the_oldest_turns_and_the_turn_runs(tiny_llama):
    seen: list = []
    engine = _engine(tiny_llama, seen)
    try:
        full_before = []
        results = []
        msgs = []
        for i in range(5):
            msgs.append(_user(i))
            full_before.append(len(engine._chat_tokens(list(msgs))))
            cached_before = list(engine.cached)
            results.append(engine.chat(list(msgs), turn_id=i + 1))
            msgs.append({"role": "assistant", "content": REPLY})
            shifts = _of_turn(seen, ev.ContextShifted, i + 1)
            if shifts:
                break
        else:
            pytest.fail(f"no context shift in 5 turns; full prompts {full_before}")
        turn = len(results)
        assert turn >= 3, full_before  # the chat has to have filled the context first
        shift, = shifts
        started, = _of_turn(seen, ev.TurnStarted, turn)
        done = results[-1]
        assert isinstance(done, ev.TurnDone) and done.stop_reason != "context_full"
        # the event comes before the prefill, and says which turns went
        assert seen.index(shift) < seen.index(started)
        assert shift.dropped_turns[0] == 1 and shift.dropped_turns == tuple(range(1, len(shift.dropped_turns) + 1))
        assert shift.dropped_turns[-1] < turn  # the newest turn always stays
        assert shift.prompt_tokens == started.prompt_tokens == done.metrics.prompt_tokens
        assert shift.prompt_tokens + 16 <= 256  # the reply's room (-n 16) is left free
        assert shift.dropped_tokens == full_before[-1] - shift.prompt_tokens > 0
        # the cache held the whole chat: the dropped turns' cells were cut out and the rest
        # moved back (runner.engine.kv_shift), so the prompt reuses the kept prefix (the
        # system prompt) and the later turns, and computes only what the cache never held
        assert shift.kept_tokens > 0 and shift.shifted_cells > 0 and shift.no_shift is None
        assert shift.reused_tokens == started.reused_tokens > shift.kept_tokens
        assert shift.prefix_broken_at == started.first_diff_index
        assert shift.recomputed_tokens < shift.prompt_tokens - shift.kept_tokens  # less than without the shift
        p0 = shift.kept_tokens
        after_cut = cached_before[:p0] + cached_before[p0 + shift.shifted_cells:]
        assert engine.cached[:shift.reused_tokens] == after_cut[:shift.reused_tokens]
        assert done.metrics.reused_tokens == shift.reused_tokens
        assert done.metrics.prefill_tokens == shift.recomputed_tokens
        labels = [seg[0] for seg in done.metrics.timeline]
        n = len(shift.dropped_turns)
        assert f"context shift (dropped turn{'' if n == 1 else 's'} {turn_ranges(shift.dropped_turns)})" in labels
    finally:
        engine.close()


def test_the_next_turn_that_drops_the_same_turns_keeps_its_cached_prefix(tiny_llama):
    """A long first message, then short ones: dropping turn 1 frees room for several
    turns, which drop the same turn and reuse the cache past the kept prefix."""
    seen: list = []
    engine = _engine(tiny_llama, seen)
    try:
        msgs = []
        for i in range(6):
            text = " ".join(f"w{k}" for k in range(60)) if i == 0 else f"{WORDS[i]} short one"
            msgs.append({"role": "user", "content": text})
            engine.chat(list(msgs), turn_id=i + 1)
            msgs.append({"role": "assistant", "content": "ok"})
    finally:
        engine.close()
    shifts = [e for e in seen if isinstance(e, ev.ContextShifted)]
    assert [e.dropped_turns for e in shifts][:2] == [(1,), (1,)], shifts
    first, again = shifts[:2]
    assert first.shifted_cells > 0 and first.reused_tokens > first.kept_tokens  # the cut kept the later turns
    assert again.reused_tokens > again.kept_tokens  # the same turn dropped: the cache held past the kept prefix
    assert again.prefix_broken_at is None or again.prefix_broken_at == again.reused_tokens
    for e in shifts:  # every shifted prompt fits with room for the reply
        assert e.prompt_tokens + 16 <= 256


def test_no_context_shift_refuses_as_before(tiny_llama):
    seen: list = []
    engine = _engine(tiny_llama, seen, context_shift=False)
    try:
        results = _chat(engine, seen, 6)
    finally:
        engine.close()
    assert not [e for e in seen if isinstance(e, ev.ContextShifted)]
    refused = [r for r in results if isinstance(r, ev.TurnRefused)]
    assert refused, [type(r).__name__ for r in results]
    r = refused[0]
    assert r.reason == f"prompt is {r.prompt_tokens:,} tokens but the context holds 256: start a new chat or raise -c"


def test_keep_n_keeps_the_turns_that_begin_in_the_first_n_tokens(tiny_llama):
    seen: list = []
    engine = _engine(tiny_llama, seen, keep=60)  # the system prompt (~35 tokens) and turn 1 begin below 60
    try:
        _chat(engine, seen, 6)
    finally:
        engine.close()
    shifts = [e for e in seen if isinstance(e, ev.ContextShifted)]
    assert shifts and all(e.dropped_turns[0] == 2 for e in shifts), [e.dropped_turns for e in shifts]


def test_a_message_that_does_not_fit_alone_is_refused_and_says_what_was_dropped(tiny_llama):
    seen: list = []
    engine = _engine(tiny_llama, seen)
    try:
        msgs = [_user(0), {"role": "assistant", "content": REPLY},
                {"role": "user", "content": " ".join(f"word{k}" for k in range(400))}]
        r = engine.chat(msgs, turn_id=1)
    finally:
        engine.close()
    assert isinstance(r, ev.TurnRefused)
    assert " even with turn 1 dropped, but the context holds 256: start a new chat or raise -c" in r.reason
    assert not [e for e in seen if isinstance(e, (ev.ContextShifted, ev.TurnStarted))]


def test_measure_counts_the_prompt_the_shift_would_send(tiny_llama):
    seen: list = []
    engine = _engine(tiny_llama, seen)
    try:
        msgs = []
        for i in range(6):
            msgs += [_user(i), {"role": "assistant", "content": REPLY}]
        msgs.append(_user(6))
        m = engine.measure_prompt(7, msgs)
        assert m.request_id == 7 and m.dropped_turns > 0 and m.prompt_tokens + 16 <= 256
        assert len(engine._chat_tokens(msgs)) > 256
    finally:
        engine.close()


# ------------------------------------------------------------------ the policy alone

def _count(messages):
    """A stand-in tokenizer: 2 tokens of header per message plus one per word, 3 for the reply's."""
    return [0] * (sum(2 + len(m["content"].split()) for m in messages) + 3)


def _msgs(n_turns: int, words: int = 8, system: bool = True) -> list[dict]:
    out = [{"role": "system", "content": "be brief"}] if system else []
    for _ in range(n_turns):
        out.append({"role": "user", "content": " ".join(["u"] * words)})
        out.append({"role": "assistant", "content": " ".join(["a"] * words)})
    return out + [{"role": "user", "content": "last"}]


def test_split_turns_keeps_replies_with_their_message():
    head, turns = split_turns(_msgs(2))
    assert [m["role"] for m in head] == ["system"]
    assert [[m["role"] for m in t] for t in turns] == [["user", "assistant"], ["user", "assistant"], ["user"]]


def test_fit_drops_the_fewest_oldest_turns_and_never_the_system_prompt_or_the_last():
    msgs = _msgs(5)  # system 4, each turn 20, last 3, reply header 3: 110 tokens
    full = _count(msgs)
    assert len(full) == 110
    f = fit_turns(msgs, full, _count, n_ctx=100, room=20)  # needs 30 fewer: two turns
    assert f.dropped_turns == (1, 2) and len(f.tokens) == 70
    assert f.messages[0]["role"] == "system" and f.messages[-1]["content"] == "last"
    assert fit_turns(msgs, full, _count, n_ctx=130, room=20).dropped_turns == ()
    # nothing can make it leave the room: every droppable turn goes, the caller decides
    f = fit_turns(msgs, full, _count, n_ctx=20, room=10)
    assert f.dropped_turns == (1, 2, 3, 4, 5) and len(f.tokens) == 10


def test_keep_counts_turn_starts_in_tokens():
    msgs = _msgs(5)
    starts = lambda m: len(_count(m)) - 3  # noqa: E731  without the reply's header
    f = fit_turns(msgs, _count(msgs), _count, n_ctx=100, room=20, keep=5, start_of=starts)
    assert f.dropped_turns == (2, 3)  # turn 1 begins at token 4 < 5: kept
    f = fit_turns(msgs, _count(msgs), _count, n_ctx=100, room=20, keep=4, start_of=starts)
    assert f.dropped_turns == (1, 2)


def test_turn_ranges():
    assert turn_ranges((1, 2, 3)) == "1–3" and turn_ranges((2,)) == "2" and turn_ranges((1, 2, 4)) == "1–2, 4"
