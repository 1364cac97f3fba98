"""Ctrl+L in the middle of a reply clears what belonged to that turn (issue 12, item 14):
the prefill pane's counts, the stream tail under the chat, the KV fill; the cancelled
turn's late events do not paint them again, and the next turn shows only its own."""

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.physics.verdicts import estimate_verdict
from kvtop.runner.settings import Settings
from kvtop.tui.panes.chat import StreamTail
from kvtop.tui.panes.decode import DecodePane
from kvtop.tui.panes.estimate import EstimatePane
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.prefill import PrefillPane

SLOW_REPLY = [f"word{i} " for i in range(200)]  # 200 tokens at 20 tok/s: 10 s of decode


def _app(tmp_path, model):
    loaded = smollm_loaded(model)
    turns = [scripted_turn(1, 1000.0, 700, 0, SLOW_REPLY, pp_tok_s=2000, tg_tok_s=20),
             scripted_turn(2, 2000.0, 40, 0, ["Fresh", " start", "."], pp_tok_s=2000, tg_tok_s=200)]
    return make_app(Settings(model, n_ctx=4096), lambda s: ScriptedEngine(s, loaded, turns, speed=1.0),
                    tmp_path, live_system=False, write_transcript=False)


async def test_ctrl_l_mid_reply_clears_the_turns_panes_and_they_stay_clear(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Tell me a long story.")
        tail, prefill, kv = app.query_one(StreamTail), app.query_one(PrefillPane), app.query_one(KVPane)
        await wait_until(pilot, lambda: "word5" in tail.text, timeout=10, what="the reply streaming")
        assert prefill.total == 700 and kv.cells > 700 and "700/700" in screen_text(app)

        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: not app.turn_running, timeout=10, what="the cancel")
        for _ in range(10):  # the cancelled turn's late events, if any, arrive in this time
            await pilot.pause(0.05)
        text = screen_text(app)
        assert tail.text == "" and "word" not in text  # neither the tail nor the chat keep the dead reply
        assert prefill.total == 0 and prefill.done == 0 and "700/700" not in text
        assert kv.cells == 0 and app.session.messages == []
        # the decode pane, the KV pane's "full in" projection and the estimate's live
        # column said the dead reply's rate (seen by a new user)
        decode, estimate = app.query_one(DecodePane), app.query_one(EstimatePane)
        assert decode.state == "idle" and decode.rate is None and "tok/s live" not in text
        assert kv.rate is None and "20.0 tok/s" not in text
        assert estimate.live is None and estimate.forecast is None
        # the cut turn ran: it stays in the session's records (F2, the bundle, the quit
        # summary), as a cancelled turn, though no longer in the conversation
        await wait_until(pilot, lambda: len(app.turns) == 1, timeout=5, what="the cut turn recorded")
        assert app.turns[0].stop_reason == "new_chat" and app.turns[0].metrics.prompt_tokens == 700
        from kvtop.tui.turn.waterfall import WaterfallScreen

        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), timeout=5, what="F2")
        assert "cut by a new chat (Ctrl+L)" in screen_text(app)
        await pilot.press("escape")

        await send(pilot, "Again.")
        await wait_until(pilot, lambda: "Fresh start." in screen_text(app) and not app.turn_running, timeout=10,
                         what=f"turn 2 ({len(app.turns)} turns)")
        await wait_until(pilot, lambda: "40/40" in screen_text(app), timeout=5, what="turn 2's prefill")
        text = screen_text(app)
        assert "Fresh start." in text and "word1" not in text and "700" not in text.split("Prefill", 1)[1][:200]
        assert [t.user for t in app.turns] == ["Tell me a long story.", "Again."]


async def test_the_estimate_pane_belongs_to_the_current_chat_and_turn(tmp_path, smollm_shaped):
    """A new user read the cleared chat's last TTFT and verdict as the new chat's, and,
    while a turn ran, the previous turn's verdict beside this turn's live figures."""
    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(1, 1000.0, 40, 0, ["Short", "."], pp_tok_s=2000, tg_tok_s=200),
             scripted_turn(2, 2000.0, 700, 0, SLOW_REPLY, pp_tok_s=2000, tg_tok_s=20)]
    app = make_app(Settings(smollm_shaped, n_ctx=4096), lambda s: ScriptedEngine(s, loaded, turns, speed=1.0),
                   tmp_path, live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        estimate = app.query_one(EstimatePane)
        idle_verdict = estimate_verdict(estimate.rows)
        await send(pilot, "Hi.")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=10, what="turn 1")
        await wait_until(pilot, lambda: estimate.rows.row("ttft").measured is not None, timeout=5, what="rows")
        first_verdict = estimate_verdict(estimate.rows)[:30]  # the line wraps on screen
        assert first_verdict != idle_verdict[:30] and first_verdict in screen_text(app)

        await send(pilot, "Tell me a long story.")
        await wait_until(pilot, lambda: "word5" in app.query_one(StreamTail).text, timeout=10, what="turn 2 decoding")
        text = screen_text(app)
        assert first_verdict not in text and "the verdict comes when this turn ends" in text

        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: not app.turn_running, timeout=10, what="the cancel")
        await pilot.pause(0.2)
        assert estimate.rows.row("ttft").measured is None and estimate.rows.row("decode").measured is None
        text = screen_text(app)
        assert first_verdict not in text and "the verdict comes" not in text
