"""Ctrl+R starts a fresh engine: its KV cache is empty, so the KV pane must not keep the
old engine's cells (a new user's trial: "1,647/4,096 cells 40.2%" stayed after the
restart), and the prefill and decode panes drop the old engine's live figures, as a
llama-server restart already did."""

from helpers import one_turn, screen_text, scripted_app, wait_until


async def test_ctrl_r_empties_the_kv_pane_and_the_live_panes(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["The", " moon", " is", " far", "."])
    async with app.run_test(size=(160, 50)) as pilot:
        await one_turn(pilot, "a question of some length")
        await pilot.pause(0.2)
        before = screen_text(app)
        assert "0/4,096 cells" not in before and "no turn yet" not in before  # the turn's figures
        old = app.session.engine
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: app.session.engine is not old and app.loaded is not None,
                         what="the new engine")
        await pilot.pause(0.2)
        after = screen_text(app)
        assert "0/4,096 cells" in after and "0/0 tok" in after  # the KV and prefill panes
        assert "N/A no turn yet" in after  # the decode pane
        assert "engine restarted with the same settings" in after
