"""SVG snapshots of the dashboard: 80x24 and 160x50 in dark and light themes, and each
page at 80x24, 100x30 and 120x40 (tui/dashboard.py splits the panes into pages there).

Deterministic: a scripted engine replays fixed events with fixed timestamps, the
clock is fixed, hardware and memory figures are fixed, nothing samples the system.
Update after an intended change with ``pytest --snapshot-update`` and look at the
report it writes before committing.
"""

import pytest
from helpers import make_app, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.runner.system.hardware import SystemMemory
from kvtop.runner.system.memory import MemorySample

PIECES = ["The", " moon", " is", " Earth", "'s", " only", " natural", " satellite", ",", " about",
          " 384", ",", "400", " km", " away", ". ", "It", " has", " no", " light", " of", " its",
          " own", ": ", "[bold]", "markup", "[/]", " stays", " text", "."]

MEMORY = MemorySample(engine_rss=251 * 2**20, ui_rss=61 * 2**20,
                      system=SystemMemory(24 * 2**30, 22 * 2**30, 2 * 2**30, 0, 2**30),
                      gpus=(), gpu_note="no NVIDIA GPU (NVML Shared Library Not Found)")


def build(theme: str, tmp_path, model: str):
    settings = Settings("/models/SmolLM2-135M-Instruct.Q4_1.gguf", n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(settings.model)
    turns = [scripted_turn(1, 1000.0, 37, 0, PIECES, pp_tok_s=420.0, tg_tok_s=150.0)]
    factory = lambda s: ScriptedEngine(s, loaded, turns)

    app = make_app(settings, factory, tmp_path, live_system=False, memory_sample=MEMORY,
                   clock=lambda: 5000.0, write_transcript=False)
    # the facts come from SmolLM2's header (``model``), the path shown is the scripted one
    app.settings = Settings(model, n_ctx=4096, n_threads=2, threads_why="set by -t").resolved()
    app.looks.prefs.theme = theme
    return app


async def chat_turn(pilot):
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None and app.facts is not None, what="load")
    await send(pilot, "Tell me about the moon.")
    await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
    await pilot.pause(0.3)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
@pytest.mark.parametrize("theme", ["kvtop-dark", "kvtop-light"])
def test_dashboard_snapshot(snap_compare, tmp_path, smollm_shaped, size, theme):
    assert snap_compare(build(theme, tmp_path, smollm_shaped), terminal_size=size, run_before=chat_turn)


async def settled(pilot):
    """The dashboard re-plans after a pane's lines change (tui/dashboard.py): wait for it."""
    app = pilot.app
    for _ in range(3):
        await wait_until(pilot, lambda: not app.dash._fit_pending, what="the dashboard's plan")
        app.dash.fit()
        await pilot.pause()


async def chat_turn_then_pages(pilot, pages: int):
    await chat_turn(pilot)
    await settled(pilot)
    for _ in range(pages):
        await pilot.press("f6")
        await settled(pilot)


@pytest.mark.parametrize("size,page", [((80, 24), 1), ((80, 24), 2), ((80, 24), 3), ((100, 30), 1),
                                       ((120, 40), 0), ((120, 40), 1)])
def test_each_page_snapshot(snap_compare, tmp_path, smollm_shaped, size, page):
    """The pages a smaller terminal gets: every pane on one of them, none cut."""
    async def before(pilot):
        await chat_turn_then_pages(pilot, page)

    assert snap_compare(build("kvtop-dark", tmp_path, smollm_shaped), terminal_size=size, run_before=before)
