"""One voice (issue 33, item 6): two places that state one figure agree, and numbers read
the same everywhere ("2,000", "307 tok/s"). Each case is one a new user met."""

from kvtop.runner import events as ev
from kvtop.runner.policy.context_shift import shift_line
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.prefill import PrefillPane


def empty_cache_shift() -> ev.ContextShifted:
    """Turns 1-2 left out of a 38-token prompt, over an empty cache (a restart, a resumed
    chat): no prefix of it was cached, so none held."""
    return ev.ContextShifted(3, (1, 2), 900, 0, 38, 0, None, 4096, 1000.0)


def test_a_shift_over_an_empty_cache_does_not_say_the_cached_prefix_held():
    """The chat said "the cached prefix held, computing 38 new tokens" while the Prefill
    pane said "38/38 tok reused 0"."""
    e = empty_cache_shift()
    chat = shift_line(e)
    assert "held" not in chat and "nothing was cached, computing all 38 tokens" in chat, chat
    pane = PrefillPane()
    pane.begin(ev.TurnStarted(3, 38, 0, 4096, "gguf", None, 0.002, 0.0005, None, 1000.0), shift=e)
    text = pane.render().plain
    assert "0/38 tok  reused 0" in text and "held" not in text and "nothing was cached" in text, text
    # a cache that did hold its prefix still says so, in both
    held = ev.ContextShifted(3, (1, 2), 900, 20, 38, 20, None, 4096, 1000.0)
    assert "the cached prefix held, computing 18 new tokens" in shift_line(held)
    pane.begin(ev.TurnStarted(3, 38, 20, 4096, "gguf", None, 0.002, 0.0005, None, 1000.0), shift=held)
    assert "cached prefix held" in pane.render().plain


def test_a_full_context_is_full_not_full_in_one_token():
    """A reply ended "context full" (the engine stops at the last cell: it samples the
    token there but never decodes it) and the KV pane under it said "full in 1 tok ≈ 173 ms"."""
    pane = KVPane()
    pane.n_ctx = 4096
    pane.set_cells(4095, 5.78)
    text = pane.render().plain
    assert "full in" not in text and "context full" in text, text
    pane.set_cells(4094, 5.78)  # two cells left: one more token, then full
    assert "full in 2 tok" in pane.render().plain


def test_load_outcomes_count_tokens_with_thousands_separators():
    from kvtop.runner.server.load_outcomes import of_stream

    _, why = of_stream("/completion", False, 1500, 2048)
    assert why == "/completion: the reply ended without a stop event after 1,500 of 2,048 tokens"


async def test_the_decode_pane_states_its_bandwidth_ceiling_once_as_a_turn_runs(tmp_path, smollm_shaped):
    """The header said one bandwidth ceiling and the legend under the chart another (a
    replay showed 50.9 and 52.4 tok/s): the header follows every token's depth, the legend
    was the ceiling at the chart's last redraw, seconds of tokens before. Read off the
    screen while a turn decodes 60 tokens at 15 tok/s (the chart redraws every 4 s here, so
    its legend would lag the header by dozens of tokens): every ceiling the pane names is one."""
    import re

    from helpers import make_app, screen_text, send, wait_until
    from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

    from kvtop.runner.settings import Settings

    turn = scripted_turn(1, 1000.0, 40, 0, [" w"] * 60, tg_tok_s=15.0)
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                   lambda s: ScriptedEngine(s, loaded, [turn], speed=1.0), tmp_path, live_system=False,
                   write_transcript=False)
    figures: list[set[str]] = []
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turn_running and app.dash.decode.series, what="decode")
        while app.turn_running:
            text = screen_text(app)
            figures.append(set(re.findall(r"bandwidth ceiling ([\d,.]+ tok/s)", text)))
            await pilot.pause(0.3)
        await pilot.pause(0.3)
        figures.append(set(re.findall(r"bandwidth ceiling ([\d,.]+ tok/s)", screen_text(app))))
    assert len(figures) > 5
    assert [sorted(f) for f in figures if len(f) != 1] == []
