"""The live KV-quality measurement (runner/engine/live_kld.py) on the demo model: real
numbers for q8_0/q8_0 and q4_0/q4_0 against the running f16 cache, and the chat's next
turn exactly as it is without the measurement (same tokens at --temp 0, same reused
prefix); a cancelled measurement leaves the same next turn too."""

import threading

import pytest

from kvtop.runner import events as ev
from kvtop.runner.engine.engine import Engine
from kvtop.runner.engine.live_kld import MIN_TOKENS, live_pairs, measure_chat
from kvtop.runner.settings import Settings

FIRST = "Name three colours of the rainbow and say one thing about each of them."
SECOND = "Now pick one of them and write two sentences about it."


def _settings(path: str, **kw) -> Settings:
    return Settings(path, n_ctx=512, temp=0, n_predict=12, n_threads=2, n_threads_batch=2, **kw)


def _turns(path: str, measure: str | None, **kw):
    """Two turns; between them the measurement (``measure``: None, "run", "cancel").
    Returns (the second turn's token ids, its reused count, the KldMeasured or None, progress)."""
    seen: list[object] = []
    cancel = threading.Event()
    engine = Engine(_settings(path, **kw), seen.append, cancel)
    try:
        engine.load()
        first = engine.chat([{"role": "user", "content": FIRST}], turn_id=1)
        assert isinstance(first, ev.TurnDone)
        messages = [{"role": "user", "content": FIRST}, {"role": "assistant", "content": first.text}]
        measured = None
        if measure:
            if measure == "cancel":
                cancel.set()
            measured = measure_chat(engine, 2, messages, seen.append, cancel)
            cancel.clear()
        mark = len(seen)
        second = engine.chat(messages + [{"role": "user", "content": SECOND}], turn_id=3)
        assert isinstance(second, ev.TurnDone)
        ids = [e.token_id for e in seen[mark:] if isinstance(e, ev.TokenEvent)]
        progress = [e for e in seen if isinstance(e, ev.KldProgress)]
        return ids, second.metrics.reused_tokens, measured, progress
    finally:
        engine.close()


@pytest.fixture(scope="module")
def plain(smollm_path):
    return _turns(smollm_path, None)


def test_measures_the_chat_and_leaves_the_next_turn_as_it_was(smollm_path, plain):
    ids, reused, measured, progress = _turns(smollm_path, "run")
    assert (ids, reused) == plain[:2] and reused > 0 and ids  # the very same turn, prefix reused
    assert isinstance(measured, ev.KldMeasured) and measured.stopped is None
    assert (measured.base_type_k, measured.base_type_v) == ("f16", "f16")
    assert [(p.type_k, p.type_v) for p in measured.pairs] == [("q8_0", "q8_0"), ("q4_0", "q4_0")]
    q8, q4 = measured.pairs
    assert measured.n_tokens >= MIN_TOKENS and q8.count == measured.n_tokens - 1 == q4.count
    assert q8.error is None and 0 < q8.kld_mean < q4.kld_mean < 1  # 4 bits move the predictions further
    assert 0.5 < q4.same_top <= q8.same_top <= 1 and q8.kld_99 >= q8.kld_mean
    assert progress and progress[-1].done == progress[-1].total == measured.n_tokens
    assert (progress[0].done, progress[0].total) == (0, measured.n_tokens)  # the chat's size before its first slice


def test_a_cancelled_measurement_stops_and_leaves_the_next_turn(smollm_path, plain):
    ids, reused, measured, _ = _turns(smollm_path, "cancel")
    assert measured is not None and measured.stopped == "cancelled"
    assert (ids, reused) == plain[:2]


def test_a_quantized_cache_is_measured_against_f16():
    assert live_pairs("q8_0", "q8_0") == (("f16", "f16"), (("q8_0", "q8_0"),))
    assert live_pairs("f16", "f16") == (("f16", "f16"), (("q8_0", "q8_0"), ("q4_0", "q4_0")))
    assert live_pairs("q4_0", "f16") == (("f16", "f16"), (("q4_0", "f16"),))


def test_the_measurement_runs_the_chats_lora_adapters_too(tmp_path, smollm_path):
    """--lora: the scoring contexts carry the chat's adapters (else they measure another model):
    the same chat measures differently with the adapter than without it."""
    from gguf_factory import write_tiny_llama, write_tiny_lora

    model = write_tiny_llama(tmp_path / "tiny64.gguf", smollm_path, n_embd=128, n_head=2, n_head_kv=1)
    adapter = write_tiny_lora(tmp_path / "lora.gguf", n_embd=128, scale=1.0)
    messages = [{"role": "user", "content": FIRST * 3}, {"role": "assistant", "content": SECOND * 3}]
    out = []
    for lora in ((), ((adapter, 1.0),)):
        engine = Engine(Settings(model, n_ctx=256, n_threads=2, temp=0, lora=lora), lambda e: None)
        try:
            engine.load()
            out.append(measure_chat(engine, 1, messages, lambda e: None, threading.Event()))
        finally:
            engine.close()
    assert all(m.stopped is None and m.pairs[0].error is None for m in out), out
    assert out[0].pairs[0].count == out[1].pairs[0].count and out[0].pairs[0].kld_mean != out[1].pairs[0].kld_mean
