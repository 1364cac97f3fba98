"""The TTFT waterfall and the prefix-cache diagnosis, on the real model."""

import os

import pytest
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.engine.engine import Engine
from kvtop.runner.events import TurnStarted
from kvtop.runner.physics.verdicts import ttft_verdict
from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings
from kvtop.tui.turn.waterfall import WaterfallScreen


def test_changed_system_prompt_shows_where_the_cache_diverged(smollm_path):
    seen = []
    e = Engine(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=4, n_ubatch=64, n_batch=64), seen.append)
    e.load()
    try:
        question = {"role": "user", "content": "Describe the sea. " * 40}
        a = [{"role": "system", "content": "You are a calm poet who writes about water."}, question]
        b = [{"role": "system", "content": "You are a loud pirate who writes about water."}, question]
        e.chat(a)
        done = e.chat(b)
        ta, tb = e.tokenize(e.render(a).text, False), e.tokenize(e.render(b).text, False)
        expected = next(i for i, (x, y) in enumerate(zip(ta, tb)) if x != y)
        started = [x for x in seen if isinstance(x, TurnStarted)][-1]
        assert started.first_diff_index == expected == done.metrics.reused_tokens
        assert "calm" in started.diff_context[0] and "loud" in started.diff_context[1]
        m = done.metrics
        # contiguous segments that add up to TTFT (within 1%)
        assert sum(dt for _, _, dt in m.timeline) == pytest.approx(m.ttft_s, rel=0.01)
        starts = [s for _, s, _ in m.timeline]
        assert starts == sorted(starts)
        for (_, s0, d0), (_, s1, _) in zip(m.timeline, m.timeline[1:]):
            assert s0 + d0 == pytest.approx(s1, abs=1e-9)
        labels = [label for label, _, _ in m.timeline]
        assert labels[:3] == ["wait for engine", "template", "tokenize"]
        assert len([x for x in labels if x.startswith("ubatch")]) == len(m.ubatches) == -(-m.prefill_tokens // 64)
        verdict = ttft_verdict(m, started.first_diff_index, started.diff_context)
        assert f"differs from the cached one at token {expected}" in verdict
        assert f"{m.prefill_tokens:,} recomputed" in verdict
    finally:
        e.close()


async def test_waterfall_screen_for_a_long_prompt(smollm_path, tmp_path):
    settings = Settings(smollm_path, n_ctx=4096, temp=0, n_predict=4)
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        prompt = tmp_path / "long.txt"
        prompt.write_text("The lighthouse keeper counted the waves. " * 300)
        await send(pilot, f"/file {prompt}")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=120, what="long turn")
        m = app.turns[-1].metrics
        assert m.prompt_tokens > 2000 and len(m.ubatches) >= 4
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), timeout=5, what="waterfall")
        table = str(app.screen.query_one("#waterfall-table").render())
        assert "ubatch 1 (512 tok)" in table and "first visible char" in table and "sum of segments" in table
        verdict = str(app.screen.query_one("#waterfall-verdict").render())
        assert verdict.startswith("compute-bound") and f"{m.prefill_tokens:,} tokens" in verdict
        assert "Time to first token" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, WaterfallScreen)


def test_prompt_cache_saves_and_restores_the_kv_state(smollm_path, tmp_path):
    from kvtop.runner import events as ev

    cache = str(tmp_path / "system.kvcache")
    msgs = [{"role": "system", "content": "You are a careful assistant. " * 60}, {"role": "user", "content": "Hi"}]
    results = []
    for _ in range(2):
        seen = []
        e = Engine(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=8, prompt_cache=cache), seen.append)
        e.load()
        try:
            results.append((e.chat(msgs), [x for x in seen if isinstance(x, ev.PromptCache)]))
        finally:
            e.close()
    (first, notes1), (second, notes2) = results
    assert [n.action for n in notes1] == ["saved"] and notes1[0].tokens == first.metrics.prompt_tokens
    assert notes1[0].bytes == os.path.getsize(cache) > 376 * 22.5 * 1024
    assert [n.action for n in notes2] == ["restored"] and notes2[0].tokens == first.metrics.prompt_tokens
    assert second.metrics.reused_tokens == first.metrics.prompt_tokens - 1 and second.metrics.prefill_tokens == 1
    assert second.text == first.text
    assert second.metrics.ttft_s < first.metrics.ttft_s / 5


async def test_prompt_cache_note_in_the_ui(smollm_path, tmp_path):
    from kvtop.tui.panes.prefill import PrefillPane

    cache = str(tmp_path / "c.kvcache")
    for run in range(2):
        app = make_app(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=4, prompt_cache=cache,
                                system_prompt="You are terse. " * 40), EngineProcess, tmp_path / str(run), live_system=False)
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            await send(pilot, "Hi")
            await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
            note = app.query_one(PrefillPane).cache_note
    assert note.startswith("prompt cache restored:") and "MiB" in note and "saved ≈" in note
