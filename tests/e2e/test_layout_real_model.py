"""At 160x48 the real demo model's dashboard is one page before, during and after its
turns (issue 33, item 4): with the real engine's TTFT waterfall and the real verdict
(on a busy machine it runs to nine lines), Estimate and Memory went to page 2 after a
turn and came back at the next prefill. The scripted version of this walk, at five
sizes, is tests/unit/tui/test_layout_stays_put.py."""

from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings

TITLES = ("Prefill", "KV cache", "Decode", "Estimate vs actual", "Memory")


async def test_the_demo_model_keeps_every_pane_on_one_page_at_160x48(tmp_path, smollm_path):
    app = make_app(Settings(smollm_path, n_ctx=1024, temp=0, n_predict=48, ignore_eos=True, n_threads=1), EngineProcess, tmp_path)
    seen = {}

    async def record(step: str) -> None:
        await pilot.pause(0.2)
        text = screen_text(app)
        seen[step] = (app.dash.pager.display, [t for t in TITLES if f"─ {t} ─" not in text])
        assert seen[step] == (False, []), (step, text)
        assert app.query_one("#metrics").max_scroll_y == 0, step

    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await record("loaded")
        for i, question in enumerate(["What is the capital of France?", "And of Italy?"], 1):
            await send(pilot, question)
            # a reply of 48 tokens (eos ignored) runs over a second; on a fast machine a short
            # reply (CI: "The capital of France is Paris.", 24 tokens at most) had ended inside
            # pilot.press, so "running" was never seen. The turn counted as started either way.
            await wait_until(pilot, lambda: app.turn_running or len(app.turns) >= i, what=f"turn {i} to start")
            await record(f"turn {i} running")
            await wait_until(pilot, lambda: len(app.turns) == i and not app.turn_running, what=f"turn {i}")
            await record(f"after turn {i}")
            assert "TTFT" in app.dash.prefill.render().plain  # the real waterfall is in the pane
        await pilot.press("ctrl+l")
        await record("new chat")
        await pilot.press("ctrl+z")
        await record("undo")
    assert len(seen) == 7
