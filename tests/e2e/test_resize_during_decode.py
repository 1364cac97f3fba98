"""Resizes down to 1x1 while the real engine decodes never crash the app.

On a busy machine one resize of the whole dashboard can take a second, and the reply
once ended after two of them (CI-like run beside a CPU hog): the reply is made long
(400 tokens), and the resizes counted are only those made while it decoded."""

from helpers import make_app, screen_text, send, wait_until
from runner.process.parent import EngineProcess
from runner.settings import Settings
from tui.panes.kv import KVPane


async def test_resizing_during_decode_down_to_1x1_never_crashes(tmp_path, smollm_path):
    app = make_app(Settings(smollm_path, n_ctx=1024, temp=0, n_predict=400), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Tell me a long story about a lighthouse.")
        sizes = [(1, 1), (200, 60), (3, 2), (80, 24), (1, 1), (160, 50), (40, 10), (120, 40)]
        await wait_until(pilot, lambda: app.turn_running, what="the turn to start")
        i = during = 0
        while app.turn_running or not app.turns:
            await pilot.resize_terminal(*sizes[i % len(sizes)])
            during += app.turn_running  # this resize met the decode (or the prefill)
            await pilot.pause(0.02)
            i += 1
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        assert app.is_running and during > 3, (i, during)
        assert "KV cache" in screen_text(app)
        assert app.query_one(KVPane).cells == app.turns[-1].metrics.kv_cells_used
