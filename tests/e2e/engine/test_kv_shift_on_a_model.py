"""A context shift that keeps the cache (runner.engine.kv_shift) on a real llama.cpp
context (the tiny random-weight llama): the cells moved back give the model what a
fresh prefill of the same tokens gives it, and an engine that cannot shift recomputes
from where the prefix broke and says why."""

import llama_cpp
import pytest
from helpers import tiny_context

from kvtop.runner import events as ev
from kvtop.runner.engine.handles import TokenBuffer
from kvtop.runner.engine.kv_shift import shift_out, why_no_shift
from kvtop.runner.policy.context_shift import shift_line


@pytest.fixture
def tiny_model(tiny_llama):
    """A context of its own per test (each one moves cells around)."""
    with tiny_context(tiny_llama) as mc:
        yield mc


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


def test_an_engine_that_cannot_shift_recomputes_and_says_why(tiny_llama):
    """The fallback path on the real engine (the tiny llama can shift: told it cannot)."""
    from kvtop.runner.engine.engine import Engine
    from kvtop.runner.settings import Settings

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
