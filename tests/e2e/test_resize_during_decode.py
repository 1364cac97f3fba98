"""Resizes down to 1x1 while the real engine decodes never crash the app.

Pilot's ``resize_terminal`` waits until the app is idle, which it never is while tokens
stream in: beside a CPU hog the reply ended after two or three of them. The resizes are
posted as pilot posts them, without that wait, every 50 ms while the reply (up to 1,500
tokens, eos ignored, Esc once all 24 are posted) decodes; only those posted while it ran
are counted."""

import asyncio

from helpers import make_app, screen_text, send, wait_until
from textual.drivers.headless_driver import HeadlessDriver
from textual.events import Resize
from textual.geometry import Size

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings
from kvtop.tui.panes.kv import KVPane


def resize(app, width: int, height: int) -> None:
    """What ``Pilot.resize_terminal`` does, less its wait for an idle app."""
    size = Size(width, height)
    if isinstance(app._driver, HeadlessDriver):
        app._driver._size = size
    app.post_message(Resize(size, size))


async def test_resizing_during_decode_down_to_1x1_never_crashes(tmp_path, smollm_path):
    # a reply long enough for every resize (a busy CI run met only 4 of 24 in 200 tokens:
    # each resize re-lays out and redraws at its size); Esc ends it once they are posted
    settings = Settings(smollm_path, n_ctx=2048, temp=0, n_predict=1500, ignore_eos=True)
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Tell me a long story about a lighthouse.")
        sizes = [(1, 1), (200, 60), (3, 2), (80, 24), (1, 1), (160, 50), (40, 10), (120, 40)]
        await wait_until(pilot, lambda: app.turn_running, what="the turn to start")
        i = during = 0
        while (app.turn_running or not app.turns) and i < 3 * len(sizes):
            resize(app, *sizes[i % len(sizes)])
            during += app.turn_running  # this resize met the decode (or the prefill)
            await asyncio.sleep(0.05)
            i += 1
        if app.turn_running:
            await pilot.press("escape")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="the reply to end")
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        assert app.is_running and during > len(sizes), (i, during)
        assert "KV cache" in screen_text(app)
        assert app.query_one(KVPane).cells == app.turns[-1].metrics.kv_cells_used
