"""Traces record every engine event; replay renders the same final screen as the live run."""

import subprocess
import sys

import pytest

from helpers import make_app, send, wait_until
from runner.system.hardware import SystemMemory
from runner.process.parent import EngineProcess
from runner.settings import Settings
from runner.records.trace import ReplayEngine, TraceError, read_trace
from tui.panes.memory import MemorySample

MEMORY = MemorySample(engine_rss=250 * 2**20, ui_rss=60 * 2**20,
                      system=SystemMemory(24 * 2**30, 22 * 2**30, 2 * 2**30, 0, 2**30), gpus=(), gpu_note="no NVIDIA GPU")
QUESTIONS = ["Name three colours.", "And three animals?"]


@pytest.fixture(scope="module")
def live_run(tmp_path_factory, smollm_path):
    """A real two-turn chat on SmolLM2, recorded to a trace; returns (trace path, final SVG)."""
    import asyncio

    tmp = tmp_path_factory.mktemp("live")
    trace_path = str(tmp / "run.trace.jsonl")
    app = make_app(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=24, n_threads=2, threads_why="test"),
                   EngineProcess, tmp, live_system=False, memory_sample=MEMORY, clock=lambda: 100.0,
                   trace_path=trace_path, write_transcript=False)

    async def drive():
        async with app.run_test(size=(140, 45)) as pilot:
            app.query_one("#prompt").cursor_blink = False
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            for i, q in enumerate(QUESTIONS, 1):
                await send(pilot, q)
                await wait_until(pilot, lambda: len(app.turns) == i and not app.turn_running, what=f"turn {i}")
            await pilot.pause(0.3)
            return app.export_screenshot(), app.turns

    svg, turns = asyncio.run(drive())
    return trace_path, svg, turns


def test_trace_holds_every_event(live_run):
    path, _svg, turns = live_run
    trace = read_trace(path)
    assert trace.header["version"] == 1 and trace.facts.architecture == "llama"
    kinds = [type(obj).__name__ for kind, obj in trace.records if kind == "event"]
    assert kinds[0] in ("LoadProgress", "Loaded") and "Loaded" in kinds
    assert kinds.count("TurnDone") == 2
    tokens = [obj for kind, obj in trace.records if kind == "event" and type(obj).__name__ == "TokenEvent"]
    assert len([t for t in tokens if t.token_id >= 0]) == sum(t.metrics.decode_tokens for t in turns)
    assert [text for text, _ in trace.turns()] == QUESTIONS


async def test_replay_renders_the_same_final_screen_as_the_live_run(live_run, tmp_path):
    path, live_svg, _turns = live_run
    trace = read_trace(path)
    settings = Settings(**{k: v for k, v in trace.header["settings"].items() if k in Settings.__dataclass_fields__})
    app = make_app(settings, lambda s: ReplayEngine(trace, speed=0), tmp_path, hardware=trace.hardware,
                   facts=trace.facts, live_system=False, memory_sample=MEMORY, clock=lambda: 100.0,
                   write_transcript=False, record_trace=False, replay_messages=[t for t, _ in trace.turns()])
    async with app.run_test(size=(140, 45)) as pilot:
        app.query_one("#prompt").cursor_blink = False
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, what="replayed turns")
        await pilot.pause(0.3)
        assert app.export_screenshot() == live_svg


async def test_replay_at_recorded_speed_takes_the_recorded_time(live_run, tmp_path):
    import time

    path, _svg, turns = live_run
    trace = read_trace(path)
    settings = Settings(**{k: v for k, v in trace.header["settings"].items() if k in Settings.__dataclass_fields__})
    app = make_app(settings, lambda s: ReplayEngine(trace, speed=1.0), tmp_path, hardware=trace.hardware,
                   facts=trace.facts, live_system=False, write_transcript=False, record_trace=False,
                   replay_messages=[t for t, _ in trace.turns()][:1])
    t0 = time.monotonic()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="replayed turn")
    recorded = turns[0].metrics.prefill_s + turns[0].metrics.decode_s
    assert time.monotonic() - t0 >= recorded * 0.9


@pytest.mark.parametrize("damage,message", [
    (lambda lines: lines[:-1] + [lines[-1][: len(lines[-1]) // 2]], "cut short"),
    (lambda lines: [lines[0], "{not json\n"] + lines[1:], "not JSON"),
    (lambda lines: ['{"type": "something"}\n'] + lines[1:], "not a kvtop trace"),
    (lambda lines: [lines[0], '{"type": "event", "event": "Bogus", "data": {}}\n'], "unknown event"),
    (lambda lines: [lines[0].replace('"version": 1', '"version": 99')] + lines[1:], "trace version 99"),
])
def test_corrupted_or_truncated_trace_gives_a_clear_error(live_run, tmp_path, damage, message):
    path, _svg, _turns = live_run
    with open(path) as fh:
        lines = fh.readlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(damage(lines)))
    with pytest.raises(TraceError, match=message):
        read_trace(str(bad))
    r = subprocess.run([sys.executable, "-m", "tui", "replay", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
