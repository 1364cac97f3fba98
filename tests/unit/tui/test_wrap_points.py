"""No pane's line is word-wrapped in the middle of a phrase at 80, 120 or 160 columns
(issue 33, item 6): a pane breaks its lines between phrases itself (tui/base/format.py
pack), so every line it draws fits its width and the terminal never wraps one. The
Server pane wrapped "(counters + slots, last 1.0 s)" after "counters +", and the decode
legend "bandwidth" from "ceiling". Prose (the Estimate pane's verdict and notes) flows
as text: only its table is held to this."""

import dataclasses

import pytest
from helpers import make_app, send, wait_until
from rich.cells import cell_len
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded
from textual.app import App

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.runner.system.cpu_use import CPUUse
from kvtop.runner.system.hardware import SystemMemory
from kvtop.runner.system.memory import MemorySample

SIZES = [(80, 24), (120, 40), (160, 48)]
MEMORY = MemorySample(engine_rss=251 * 2**20, ui_rss=61 * 2**20,
                      system=SystemMemory(24 * 2**30, 22 * 2**30, 2 * 2**30, 0, 2**30),
                      gpus=(), gpu_note="no NVIDIA GPU (NVML Shared Library Not Found)")


def too_wide(lines: list[str], width: int) -> list[str]:
    return [line for line in lines if cell_len(line) > width]


def stalled_slow_turn() -> list[object]:
    """60 tokens at 12 tok/s, far under the ceiling (the legend says it is above the scale),
    with a 3 s stall after 40 (the legend names it): the longest legend there is."""
    turn = scripted_turn(1, 1000.0, 40, 0, [" w"] * 60, tg_tok_s=12.0, timeline=True)
    return [dataclasses.replace(e, t=e.t + 3.0)
            if isinstance(e, ev.TurnDone) or (isinstance(e, ev.TokenEvent) and e.index >= 40) else e for e in turn]


@pytest.mark.parametrize("size", SIZES)
async def test_every_panes_lines_fit_its_width_on_every_page(tmp_path, smollm_shaped, size):
    from kvtop.tui.panes.decode import DecodeSummary
    from kvtop.tui.panes.decode_chart import ChartLegend

    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                   lambda s: ScriptedEngine(s, loaded, [stalled_slow_turn()]), tmp_path, live_system=False,
                   memory_sample=MEMORY, write_transcript=False)
    checked = set()
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.pause(0.3)
        dash = app.dash
        dash.memory.set_cpu(CPUUse(1.9, 0.1, 1.1, 2))  # a busy machine's CPU line (at 80x24 "cores" went alone)
        dash.memory.set_sample(MEMORY)
        await pilot.pause(0.2)
        assert "above the chart" in app.query_one(ChartLegend).render().plain
        assert "others 1.1 of 2 cores" in dash.memory.render().plain
        for _ in range(max(1, len(dash.pager.labels))):
            widgets = {"prefill": dash.prefill, "kv": dash.kv, "memory": dash.memory,
                       "summary": app.query_one(DecodeSummary), "legend": app.query_one(ChartLegend),
                       "estimate": dash.estimate}
            for name, w in widgets.items():
                width = w.content_region.width
                if not w.display or width <= 0 or (name in ("summary", "legend") and not dash.decode.display):
                    continue
                lines = w.render().plain.split("\n")
                if name == "estimate":
                    lines = lines[:7]  # the table; the verdict under it is prose
                assert too_wide(lines, width) == [], (size, name, width, lines)
                checked.add(name)
            await pilot.press("f6")
            await pilot.pause(0.2)
    assert checked == {"prefill", "kv", "memory", "summary", "legend", "estimate"}, checked


class ServerApp(App):
    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def compose(self):
        from kvtop.tui.panes.server import ServerPane

        pane = ServerPane("http://127.0.0.1:8080")
        pane.styles.width = self.width
        yield pane


# the Server pane's content width at 80, 120 and 160 columns (it spans the metrics column)
@pytest.mark.parametrize("width", [40, 62, 95])
async def test_the_server_pane_breaks_its_lines_between_phrases(width):
    from kvtop.runner.physics.batching import BatchCeiling
    from kvtop.runner.server.monitor import ServerRates, ServerSnapshot, SlotState
    from kvtop.tui.panes.server import ServerPane

    slots = (SlotState(0, 4096, False, None, 0, 0, 0, 0), SlotState(1, 4096, True, 4314, 1147, 1, 40, 1106))
    rates = ServerRates(1.0, 1234.5, 56.0, 1, 0, 42_000, 4055)
    snap = ServerSnapshot("http://127.0.0.1:8080", 0.0, True, None, slots, None, rates, None, "m.gguf")
    app = ServerApp(width)
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(ServerPane)
        pane.set_snapshot(snap, BatchCeiling(2, 1e8, 612.0, 306.0), 23, 1500.0)
        await pilot.pause()
        lines = pane.render().plain.split("\n")
        assert pane.content_region.width == width
        assert too_wide(lines, width) == [], lines
        text = " ".join(lines)
        # every phrase whole on its line
        for phrase in ("(counters + slots, last 1.0 s)", "since start 42,000 prompt,", "4,055 generated tok",
                       "+23 conversations of 1,500 tokens fit", "slots 1/2 busy"):
            assert any(phrase in line for line in lines), (phrase, lines)
        assert "batched ceiling 612 tok/s" in text and "for 2 decoding (306 tok/s each)" in text
