"""kvtop tune's A/Bs inside the engine (``MeasureSettings``, runner/engine/tune_in_engine.py)
on the demo model: every candidate's arms measured with positive rates in llama-bench's
shape, the chat's KV cache untouched, a cancel mid-run answered at once with what was
measured, and a budget overrun by at most about one measurement."""

import threading
import time

import pytest

from kvtop.runner.commands.tune import base_of
from kvtop.runner.engine.engine import Engine
from kvtop.runner.engine.tune_in_engine import measure_settings
from kvtop.runner.policy.tune_messages import MeasureSettings, TuneProgress
from kvtop.runner.policy.tuning import candidate_list
from kvtop.runner.settings import Settings


@pytest.fixture(scope="module")
def engine(smollm_path):
    e = Engine(Settings(smollm_path, n_ctx=512, temp=0, n_predict=4), lambda _e: None)
    e.load()
    yield e
    e.close()


def request(engine, budget, reps=2):
    base = base_of(engine.settings)
    cands = tuple(candidate_list(base, 2, False, 16))
    return MeasureSettings(7, base, cands, 32, 16, 4, reps, float(budget))


def test_every_candidate_measured_and_the_chat_cache_untouched(engine):
    engine.chat([{"role": "user", "content": "Hi."}])
    cached = list(engine.cached)
    seen = []
    r = measure_settings(engine._parts()[0], engine.settings, request(engine, 300), seen.append, threading.Event())
    assert not r.cancelled and not r.skipped, r.skipped
    assert {p.candidate.flag for p in r.pairs} == {c.flag for c in request(engine, 1).candidates}
    for p in r.pairs:
        assert not p.partial
        for rates in (dict(p.base), dict(p.cand)):
            assert set(rates) == set(p.candidate.measures) and all(len(v) == 2 and min(v) > 0 for v in rates.values())
    assert [e.index for e in seen if isinstance(e, TuneProgress)] == list(range(1, len(r.pairs) + 1))
    assert engine.cached == cached  # the chat's KV cache: its own context, never touched
    again = engine.chat([{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "x"}])
    assert again.metrics.prompt_tokens - again.metrics.prefill_tokens > 0


def test_a_cancel_stops_it_at_once_keeping_what_it_measured(engine):
    stop = threading.Event()
    seen = []

    def emit(e):
        seen.append(e)
        if isinstance(e, TuneProgress) and e.index == 2:
            stop.set()

    t0 = time.monotonic()
    r = measure_settings(engine._parts()[0], engine.settings, request(engine, 300), emit, stop)
    assert r.cancelled and time.monotonic() - t0 < 120
    assert [p.candidate.flag for p in r.pairs if not p.partial] == ["-fa off"]
    assert r.skipped and all(why == "cancelled" for _, why in r.skipped)


def test_a_small_budget_is_overrun_by_one_measurement_at_most(engine):
    """The first fill and warmup run whole (the plan's timings); after them nothing starts
    that the time left cannot hold, and a repetition under way at the deadline ends."""
    for budget in (0.5, 6.0):
        r = measure_settings(engine._parts()[0], engine.settings, request(engine, budget, reps=3), lambda e: None,
                             threading.Event())
        assert r.probe_s > 0 and r.longest_rep_s > 0
        assert r.elapsed_s <= max(budget, r.probe_s) + r.longest_rep_s + 1.0, r  # 1 s: closing the contexts
        if r.elapsed_s < budget:
            continue
        assert any("budget" in why for _, why in r.skipped), r.skipped
