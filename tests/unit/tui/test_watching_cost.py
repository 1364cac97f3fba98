"""What keeps watching cheap: fewer frames and no collector pauses while a turn
runs, and none of it hides a figure from the user."""

import gc

from helpers import one_turn, screen_text, scripted_app, send, wait_until

from kvtop.runner.system.hardware import SystemMemory
from kvtop.runner.system.memory import MemorySample
from kvtop.tui.base.collector import TurnCollector
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.memory import MemoryPane

PIECES = ["The", " sea", " is", " wide", "."]




def sample(rss_mib: int) -> MemorySample:
    return MemorySample(engine_rss=rss_mib * 2**20, ui_rss=60 * 2**20,
                        system=SystemMemory(24 * 2**30, 20 * 2**30, 4 * 2**30, 0, 2**30))


def test_the_collector_waits_during_a_turn_and_runs_after():
    assert gc.isenabled()
    c = TurnCollector()
    c.turn_started()
    assert not gc.isenabled()
    c.turn_started()  # a second start changes nothing
    c.turn_ended()
    assert gc.isenabled()
    c.turn_ended()
    assert gc.isenabled()


async def test_a_turn_leaves_the_collector_running(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, PIECES)
    async with app.run_test(size=(160, 50)) as pilot:
        await one_turn(pilot, "Tell me about the sea.")
        assert gc.isenabled()
        assert "The sea is wide." in screen_text(app)
    assert gc.isenabled()


async def test_a_deferred_memory_sample_keeps_its_peak_and_is_drawn_with_the_next_update(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, PIECES)
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(MemoryPane)
        pane.set_sample(sample(200))
        await pilot.pause()
        assert "engine RSS 200 MiB" in screen_text(app)
        pane.set_sample(sample(900), redraw=False)
        pane.set_sample(sample(300), redraw=False)
        assert pane.stale and pane.peak_engine_rss == 900 * 2**20
        pane.redraw_if_stale()
        await pilot.pause()
        text = screen_text(app)
        assert "engine RSS 300 MiB  peak 900 MiB" in text
        assert not pane.stale


async def test_the_kv_pane_keeps_its_height_when_decode_starts(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, PIECES)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.here is not None, what="load")
        await pilot.pause()
        kv = app.query_one(KVPane)
        before = kv.size.height
        assert "no decode rate yet" in screen_text(app)
        await send(pilot, "Tell me about the sea.")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.pause()
        text = screen_text(app)
        assert "no decode rate yet" not in text and "tok/s" in text.split("full in", 1)[1].split("\n", 1)[0]
        assert kv.size.height == before


async def test_the_estimate_compares_peak_memory_only_after_a_turn(tmp_path, smollm_shaped):
    """At load the engine's RSS is a fraction of a turn's (weights are mmap-ed, paged in
    on first use): comparing it with the predicted peak would read 0.09x."""
    app = scripted_app(tmp_path, smollm_shaped, PIECES)
    async with app.run_test(size=(160, 50)) as pilot:
        app.query_one(MemoryPane).set_sample(sample(26))
        await wait_until(pilot, lambda: app.loaded is not None and app.here is not None, what="load")
        await pilot.pause()
        row = next(line for line in screen_text(app).split("\n") if "peak mem" in line)
        assert "26.0 MiB" not in row and "26.00 MiB" not in row and "N/A" in row
        app.query_one(MemoryPane).set_sample(sample(250))
        await one_turn(pilot, "Tell me about the sea.")
        row = next(line for line in screen_text(app).split("\n") if "peak mem" in line)
        assert "250 MiB" in row and "0.89x" in row  # 250 MiB measured of 281 MiB predicted
