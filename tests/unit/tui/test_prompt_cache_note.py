"""The prefill pane after a ``--prompt-cache`` restore: how much prefill it saved, at a
rate that was measured over many tokens (and says which), and no "diverged" for the one
token always recomputed for logits."""

import dataclasses
import json

from helpers import make_app, screen_text, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.records.prompt_cache_rate import rate_path, read_rate, write_rate
from kvtop.runner.settings import Settings
from kvtop.tui.panes.prefill import PrefillPane

N = 823


def _restored_turn(cache: str, first_diff: int | None = N - 1) -> list:
    """As the engine reports a restore of an identical prompt: 822 tokens reused, the
    last one computed alone (25 ms: 40 tok/s, a rate that says nothing of 800 tokens)."""
    script = scripted_turn(1, 1000.0, N, N - 1, ["Hi", "."], pp_tok_s=40.0)
    script[0] = dataclasses.replace(script[0], first_diff_index=first_diff)
    return [ev.PromptCache("restored", cache, N, 12 * 2**20, 0.002)] + script


def _app(tmp_path, smollm_shaped, turns):
    loaded = smollm_loaded(smollm_shaped)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2, prompt_cache=str(tmp_path / "p.cache"))
    return make_app(settings, lambda s: ScriptedEngine(s, loaded, turns), tmp_path,
                    live_system=False, write_transcript=False, record_trace=False)


async def _turns(pilot, n: int) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None, what="load")
    for i in range(n):
        app.query_one("#prompt").value = f"hello {i}"
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.turns) == i + 1 and not app.turn_running, what=f"turn {i + 1}")


async def test_saved_time_uses_the_rate_measured_when_the_cache_was_saved(tmp_path, smollm_shaped):
    cache = tmp_path / "p.cache"
    cache.write_bytes(b"x" * 1000)
    write_rate(str(cache), N, N / 1.82)  # as the run that saved it measured: 823 tokens in 1.82 s
    app = _app(tmp_path, smollm_shaped, [_restored_turn(str(cache))])
    async with app.run_test(size=(160, 50)) as pilot:
        await _turns(pilot, 1)
        note = app.query_one(PrefillPane).cache_note
        assert "saved ≈ 1.82 s of prefill" in note, note  # 822 tokens at 452 tok/s, not 822 / 40
        assert "measured when the cache was saved" in note


async def test_the_token_recomputed_for_logits_is_not_a_divergence(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped, [_restored_turn(str(tmp_path / "p.cache"))])
    async with app.run_test(size=(160, 50)) as pilot:
        await _turns(pilot, 1)
        assert "diverged" not in screen_text(app)


async def test_saved_time_uses_this_sessions_prefill_rate_without_a_record(tmp_path, smollm_shaped):
    cache = tmp_path / "p.cache"
    first = scripted_turn(1, 1000.0, 800, 0, ["Hi"], pp_tok_s=400.0)
    app = _app(tmp_path, smollm_shaped, [first, _restored_turn(str(cache))])
    async with app.run_test(size=(160, 50)) as pilot:
        await _turns(pilot, 2)
        note = app.query_one(PrefillPane).cache_note
        assert "saved ≈ 2.06 s of prefill" in note, note  # 822 / 400 tok/s
        assert "this session's" in note


async def test_no_measured_rate_says_so_instead_of_a_wrong_figure(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped, [_restored_turn(str(tmp_path / "p.cache"))])
    async with app.run_test(size=(160, 50)) as pilot:
        await _turns(pilot, 1)
        note = app.query_one(PrefillPane).cache_note
        assert "20.5" not in note and "saved ≈" not in note, note
        assert "no prefill rate measured" in note


async def test_a_real_divergence_is_still_shown(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped, [_restored_turn(str(tmp_path / "p.cache"), first_diff=400)])
    async with app.run_test(size=(160, 50)) as pilot:
        await _turns(pilot, 1)
        assert "cache diverged at token 400" in screen_text(app)


async def test_the_turn_that_saves_the_cache_records_its_prefill_rate(tmp_path, smollm_shaped):
    cache = tmp_path / "p.cache"
    script = scripted_turn(1, 1000.0, N, 0, ["Hi"], pp_tok_s=452.0)
    # the engine saves the cache right after the prefill, before decode
    at = next(i for i, e in enumerate(script) if isinstance(e, ev.TokenEvent))

    class Saving(ScriptedEngine):
        def _chat(self, cmd, sink):
            cache.write_bytes(b"x" * 1000)
            super()._chat(cmd, sink)

    script.insert(at, ev.PromptCache("saved", str(cache), N, 1000, 0.01))
    loaded = smollm_loaded(smollm_shaped)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2, prompt_cache=str(cache))
    app = make_app(settings, lambda s: Saving(s, loaded, [script]), tmp_path,
                   live_system=False, write_transcript=False, record_trace=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await _turns(pilot, 1)
    assert abs(read_rate(str(cache), N) - 452.0) < 1.0
    assert json.load(open(rate_path(str(cache))))["tokens"] == N
    assert read_rate(str(cache), N - 5) is None  # another cache's count: not believed
    cache.write_bytes(b"y" * 2000)  # replaced by another run or tool: not believed
    assert read_rate(str(cache), N) is None
