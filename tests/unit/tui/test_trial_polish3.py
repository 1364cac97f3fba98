"""What the third session's new-user trial found and left (docs/closing note, "New-user
trial" and "Left alone"): each a test that reads the screen, and fails on the code before
its fix."""

from helpers import scripted_app, wait_until

from kvtop.runner import events as ev
from kvtop.tui.turn.quality import QualityProgress


def _plain(widget) -> str:
    return " ".join(widget.render().plain.split())


async def test_f7_on_a_chat_under_one_slice_shows_its_forecast_eta(tmp_path, smollm_shaped):
    """F7 on a chat under 256 tokens: one slice, reported only at its end, so the ETA
    read "-" all through; the engine now says the chat's size first and the pane counts
    down the forecast of the chat through the base cache and both candidates."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi", "."])
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.query_one("#prompt").value = "hello"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
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

