"""A context shift that keeps the cache, on real models (issue 23, item 5): on SmolLM2
the dropped turn's cells are cut out and the rest moved back, so the turn computes only
the new message and its reply reads like one; Gemma-3's sliding-window cache (smaller
than the context without --swa-full) cannot shift: it recomputes, and says why."""

from helpers import cores

from kvtop.runner import events as ev
from kvtop.runner.engine.engine import Engine
from kvtop.runner.policy.context_shift import shift_line
from kvtop.runner.settings import Settings

QUESTIONS = [
    "Describe how tides are caused by the moon and the sun, in some detail, with an example of a spring tide.",
    "Explain why the sky is blue during the day and red at sunset, step by step, for a curious child.",
    "List three ways to keep bread fresh for longer and say which one works best for sourdough bread.",
    "What makes a good password? Give four rules and one example of a strong password made of words.",
    "How do bees make honey? Describe the journey from the flower to the honeycomb in a few sentences.",
    "Why do cats purr? Give two reasons scientists suggest and say which one you find more likely.",
    "Compare walking and cycling to work: two advantages of each, and which you would choose in the rain.",
    "Explain what a leap year is and why the calendar needs one, with the rule for years ending in 00.",
    "Give a short recipe for pancakes for four people, with the ingredients first and then the steps.",
    "What is the capital of France?",
]


# Gemma's context is 1,024 tokens: this note ahead of its first question fills most of it
# in one prefill (seconds) instead of eight replies' decode (30 s of the suite's time)
NOTES = "Notes on the sea: " + "The tide comes in twice a day and goes out twice a day. " * 55


def _chat_until_shift(path: str, lead: str = "", **kw):
    seen: list = []
    kw = {"n_ctx": 512, "n_predict": 48, **kw}
    engine = Engine(Settings(path, n_threads=cores(), temp=0.0, seed=1, **kw), seen.append)
    engine.load()
    try:
        msgs = []
        for i, q in enumerate(QUESTIONS):
            msgs.append({"role": "user", "content": f"{lead}\n\n{q}" if lead and i == 0 else q})
            done = engine.chat(list(msgs), turn_id=i + 1)
            assert isinstance(done, ev.TurnDone), done
            msgs.append({"role": "assistant", "content": done.text})
            shifts = [e for e in seen if isinstance(e, ev.ContextShifted)]
            if shifts:
                new_message = len(engine._chat_tokens([{"role": "user", "content": q}]))
                return shifts[0], done, new_message
        raise AssertionError(f"no context shift in the whole chat at -c {kw['n_ctx']}")
    finally:
        engine.close()


def test_smollm_shift_computes_only_the_new_message_and_replies_sanely(smollm_path):
    shift, done, new_message = _chat_until_shift(smollm_path)
    assert shift.no_shift is None and shift.shifted_cells > 0, shift
    assert shift.reused_tokens > shift.kept_tokens  # the turns after the cut stayed cached
    # what is computed is the new message (and the tail of the last reply, which the cache
    # held as sampled, without its end-of-turn token), not the chat
    assert done.metrics.prefill_tokens <= new_message + 16, (done.metrics.prefill_tokens, new_message)
    assert done.metrics.prefill_tokens < shift.prompt_tokens // 4
    assert "by shifting the cache: nothing recomputed" in shift_line(shift)
    text = done.text.strip()
    letters = sum(ch.isalpha() for ch in text)
    assert text and letters >= 0.5 * len(text.replace(" ", "")), text  # words, not noise


def test_gemma_sliding_window_takes_the_fallback_and_says_why(gemma_path):
    """Its window is 512 tokens: the window's cache holds 512 + n_ubatch cells (padded to
    256), so at -c 1024 -ub 64 it is smaller than the context and cannot shift (at -c 512
    both are 512 cells and it shifts like any other)."""
    shift, done, _ = _chat_until_shift(gemma_path, NOTES, n_ctx=1024, n_batch=64, n_ubatch=64, n_predict=96)
    assert shift.shifted_cells == 0 and shift.no_shift and "sliding-window" in shift.no_shift, shift
    assert shift.reused_tokens == shift.kept_tokens  # recomputed from where the prefix broke
    assert "the cache cannot shift (sliding-window" in shift_line(shift)
    assert done.text.strip()
