"""What the third session's new-user trial found and left (docs/closing note, "New-user
trial" and "Left alone"): each a test that reads the screen, and fails on the code before
its fix."""

import pytest
from helpers import scripted_app, wait_until

from kvtop.runner import events as ev
from kvtop.tui.turn.quality import QualityProgress


def _plain(widget) -> str:
    return " ".join(widget.render().plain.split())


async def hello_turn(pilot, app) -> None:
    """The model loads, "hello" is sent, and its turn ends."""
    await wait_until(pilot, lambda: app.loaded is not None, what="load")
    app.query_one("#prompt").value = "hello"
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")


async def test_f7_on_a_chat_under_one_slice_shows_its_forecast_eta(tmp_path, smollm_shaped):
    """F7 on a chat under 256 tokens: one slice, reported only at its end, so the ETA
    read "-" all through; the engine now says the chat's size first and the pane counts
    down the forecast of the chat through the base cache and both candidates."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi", "."])
    async with app.run_test(size=(160, 50)) as pilot:
        await hello_turn(pilot, app)
        await pilot.press("f7")
        await wait_until(pilot, lambda: app.quality.running, what="F7")
        app.post_message(QualityProgress(ev.KldProgress(app.quality.turn_id, 0, 200, 0.05, 1.0)))
        pane = app.dash.prefill
        await wait_until(pilot, lambda: pane.total == 200, what="the chat's size")
        expected = 3 * app.estimates.forecast(200, 0, 1).prefill_s  # f16 base, q8_0 and q4_0
        assert pane.forecast_s is not None and abs(pane.forecast_s - expected) < 1e-9, (pane.forecast_s, expected)
        text = _plain(pane)
        assert "0/200 tok" in text and "(forecast)" in text and "rate N/A" in text, text
        app.post_message(QualityProgress(ev.KldProgress(app.quality.turn_id, 200, 200, 1.0, 2.0)))
        await wait_until(pilot, lambda: pane.done == 200, what="the slice")
        assert "forecast" not in _plain(pane), _plain(pane)
        # the next measurement's ETA is this one's pace (1.0 s for 200 tokens): the prefill
        # forecast leaves out the KLD over the vocabulary (a trial: 7.66 s forecast, 26 s taken)
        assert app.quality._forecast_s(300) == pytest.approx(300 * 1.0 / 200)


async def test_f2_s_verdict_is_on_screen_at_80x24_without_scrolling(tmp_path, smollm_shaped):
    """F2 at 80x24 after a long prompt: the verdict came after the table of six micro-batches
    and took scrolling to reach; it is under the heading now."""
    from helpers import make_app, screen_text
    from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

    from kvtop.runner.settings import Settings

    turn = scripted_turn(1, 1000.0, 3000, 0, ["Hi", "."], pp_tok_s=300.0, timeline=True)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    app = make_app(settings, lambda s: ScriptedEngine(s, smollm_loaded(smollm_shaped), [turn]), tmp_path,
                   live_system=False, write_transcript=False, record_trace=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await hello_turn(pilot, app)
        await pilot.press("f2")
        await wait_until(pilot, lambda: app.screen.query("#waterfall-verdict"), what="F2")
        await pilot.pause()
        verdict = " ".join(app.screen.query_one("#waterfall-verdict").render().plain.split())
        shown = " ".join(screen_text(app).split())
        assert verdict.startswith("compute-bound") and verdict[:40] in shown, (verdict, shown)
        assert app.screen.query_one("#waterfall-box").scroll_y == 0


async def test_a_notice_covers_no_pane_and_no_status_line(tmp_path, smollm_shaped):
    """A notice (toast) sat at Textual's lower right, over a pane's last line (the Memory
    pane's at 160x48, the Estimate pane's peak at 80x24); it goes over the chat's oldest
    lines now, under the status bar, at every size."""
    from textual.widgets._toast import Toast

    for size in ((80, 24), (120, 40), (160, 48)):
        app = scripted_app(tmp_path, smollm_shaped, ["Hi", "."])
        async with app.run_test(size=size, notifications=True) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            app.notify("measuring the KV cache's quality on this chat: q8_0/q8_0, q4_0/q4_0 against f16/f16, "
                       "in contexts of their own beside the chat's (Esc stops)", markup=False)
            await wait_until(pilot, lambda: app.screen.query(Toast), what="the notice")
            await pilot.pause()
            (toast,) = app.screen.query(Toast)
            chat = app.query_one("#chat-column").region
            covered = [w.id for w in app.query(".pane") if w.content_region.overlaps(toast.region)]
            covered += [w.id for w in app.query("#status, #about, #pager") if w.region.overlaps(toast.region)]
            assert not covered and toast.region.x < chat.right, (size, toast.region, chat, covered)


async def test_the_estimate_pane_shows_forecast_vs_actual_at_80x24(tmp_path, smollm_shaped):
    """At 80x24 the Estimate pane's 40 columns had no forecast column: short labels make room."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi", "."])
    async with app.run_test(size=(80, 24)) as pilot:
        await hello_turn(pilot, app)
        pane = app.dash.estimate
        while not pane.size.width:  # its page
            await pilot.press("f6")
        await pilot.pause()
        lines = pane.render().plain.split("\n")
        assert lines[0].split() == ["roofline", "forecast", "measured", "ratio"], lines
        ttft = lines[1].split()
        assert ttft[0] == "TTFT" and len(ttft) == 8 and ttft[-1].endswith("x"), lines  # roofline, forecast, measured
        assert all(len(line) <= pane.size.width for line in lines[:7]), lines


async def test_the_ceiling_above_the_chart_is_not_a_line_of_its_own_at_120_columns(tmp_path, smollm_shaped):
    """At 120 columns the legend read "━ measured  ↑ bandwidth ceiling" and, alone on the
    next line, "8x the measured rate: above the chart": where the short forms take fewer
    lines they are shown; at 160 the full form fits one line."""
    from helpers import make_app
    from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

    from kvtop.runner.settings import Settings
    from kvtop.tui.panes.decode_chart import ChartLegend

    for size, said in (((120, 40), "↑ bandwidth ceiling  25x: above the chart"),
                       ((160, 48), "↑ bandwidth ceiling  25x the measured rate: above the chart")):
        turn = scripted_turn(1, 1000.0, 40, 0, [" w"] * 60, tg_tok_s=12.0)
        app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                       lambda s, turn=turn: ScriptedEngine(s, smollm_loaded(smollm_shaped), [turn]), tmp_path,
                       live_system=False, write_transcript=False, record_trace=False)
        async with app.run_test(size=size) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            app.query_one("#prompt").value = "hello"
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
            await pilot.pause()
            legend = app.query_one(ChartLegend)
            lines = legend.render().plain.split("\n")
            assert len(lines) == 1 and lines[0] == f"━ measured  {said}", (size, legend.content_region.width, lines)
            assert legend.size.height == 1, legend.size
