"""Traces record every engine event; replay renders the same final screen as the live run.

The live run is a real chat on SmolLM2: one turn, a new chat (Ctrl+L), two more turns.
Its replay must show what the live session ended with: only the turns after the new
chat, the same replies and figures (issue 12)."""

import asyncio
import os
import subprocess
import sys

import pytest
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.records.replay import ReplayEngine
from kvtop.runner.records.trace import TraceError, read_trace
from kvtop.runner.settings import Settings
from kvtop.runner.system.hardware import SystemMemory
from kvtop.runner.system.memory import MemorySample
from kvtop.tui.panes.chat import ChatLog
from kvtop.tui.panes.memory import MemoryPane

MEMORY = MemorySample(engine_rss=250 * 2**20, ui_rss=60 * 2**20,
                      system=SystemMemory(24 * 2**30, 22 * 2**30, 2 * 2**30, 0, 2**30), gpus=(), gpu_note="no NVIDIA GPU")
BEFORE_NEW_CHAT = "Say hello."
QUESTIONS = ["Name three colours.", "And three animals?"]


def chat_lines(app) -> list[tuple[str, str, str]]:
    """(role, text, footer) of every message the chat shows."""
    return [(m.role, m.text, m.footer) for m in app.query_one(ChatLog).children]


@pytest.fixture(scope="module")
def live_run(tmp_path_factory, smollm_path):
    """A real chat on SmolLM2 with a new chat in it, recorded to a trace; returns the
    trace path, the final SVG, the turns and the final chat."""
    tmp = tmp_path_factory.mktemp("live")
    trace_path = str(tmp / "run.trace.jsonl")
    app = make_app(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=12, n_threads=2, threads_why="test"),
                   EngineProcess, tmp, live_system=False, memory_sample=MEMORY, clock=lambda: 100.0,
                   trace_path=trace_path, write_transcript=False)

    async def drive():
        async with app.run_test(size=(140, 45)) as pilot:
            app.query_one("#prompt").cursor_blink = False
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            await send(pilot, BEFORE_NEW_CHAT)
            await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn 0")
            await pilot.press("ctrl+l")
            for i, q in enumerate(QUESTIONS, 2):
                await send(pilot, q)
                await wait_until(pilot, lambda: len(app.turns) == i and not app.turn_running, what=f"turn {i}")
            await pilot.pause(0.3)
            return app.export_screenshot(), app.turns, chat_lines(app)

    svg, turns, chat = asyncio.run(drive())
    return trace_path, svg, turns, chat


def replay_app(trace, tmp_path, speed=0.0, **kw):
    kw.setdefault("memory_sample", MEMORY)
    return make_app(trace.settings(), lambda s: ReplayEngine(trace, speed=speed), tmp_path, hardware=trace.hardware,
                    facts=trace.facts, live_system=False, clock=lambda: 100.0, write_transcript=False,
                    record_trace=False, **kw)


def test_trace_holds_every_event(live_run):
    path, _svg, turns, _chat = live_run
    trace = read_trace(path)
    assert trace.header["version"] == 1 and trace.facts.architecture == "llama"
    kinds = [type(obj).__name__ for kind, obj in trace.records if kind == "event"]
    assert kinds[0] in ("LoadProgress", "Loaded") and "Loaded" in kinds
    assert kinds.count("TurnDone") == 3 and kinds.count("CacheCleared") == 1
    tokens = [obj for kind, obj in trace.records if kind == "event" and type(obj).__name__ == "TokenEvent"]
    assert len([t for t in tokens if t.token_id >= 0]) == sum(t.metrics.decode_tokens for t in turns)
    assert [text for text, _ in trace.turns()] == [BEFORE_NEW_CHAT] + QUESTIONS
    order = [kind if kind != "user" else obj for kind, obj in trace.records if kind not in ("event", "forecast")]
    assert order == [BEFORE_NEW_CHAT, "new_chat"] + QUESTIONS
    # each turn's forecast, recorded after its TurnStarted, for the prompt it started with
    started = [obj for kind, obj in trace.records if kind == "event" and type(obj).__name__ == "TurnStarted"]
    forecasts = [obj for kind, obj in trace.records if kind == "forecast"]
    assert [f.prompt_tokens for f in forecasts] == [s.prompt_tokens for s in started]


async def test_replay_shows_the_final_chat_of_the_live_run(live_run, tmp_path):
    """The turn before the new chat is not shown; the rest is the live chat, footers too."""
    path, _svg, _turns, live_chat = live_run
    assert [text for role, text, _f in live_chat if role == "user"] == QUESTIONS
    app = replay_app(read_trace(path), tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: len(app.turns) == 3 and not app.turn_running, what="replayed turns")
        await wait_until(pilot, lambda: chat_lines(app) == live_chat, timeout=5, what="the live run's chat")
        assert [m.content for m in app.session.messages] == [
            text for role, text, _f in live_chat if role in ("user", "assistant")]


async def test_replay_renders_the_same_final_screen_as_the_live_run(live_run, tmp_path):
    path, live_svg, _turns, _chat = live_run
    app = replay_app(read_trace(path), tmp_path)
    async with app.run_test(size=(140, 45)) as pilot:
        app.query_one("#prompt").cursor_blink = False
        await wait_until(pilot, lambda: len(app.turns) == 3 and not app.turn_running, what="replayed turns")
        await pilot.pause(0.3)
        # all but the status bar ("replay finished"), the prompt's placeholder ("input is off")
        # and the footer (its keys follow the focus: the disabled prompt has none)
        def shown(text: str) -> list[str]:
            text = text.replace("Message (Enter to send, F1 for help)", "<prompt>")
            return text.replace("Replay: input is off (Ctrl+Q quits)", "<prompt>").splitlines()[1:-1]

        assert shown(screen_text(app)) == shown(svg_text(live_svg))


def svg_text(svg: str) -> str:
    import html
    import re

    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]*?x="([\d.]+)"[^>]*?y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(y), []).append((float(x), html.unescape(re.sub(r"<[^>]+>", "", text)).replace("\xa0", " ")))
    return "\n".join("".join(t for _x, t in sorted(parts)) for _y, parts in sorted(rows.items()))


async def test_kvtop_replay_says_what_it_is_refuses_input_and_shows_no_live_memory(live_run, tmp_path,
                                                                                    monkeypatch):
    """``kvtop replay``'s own app (launch builds it): the banner, input off with a notice
    when typed at, and no figure of the viewer's machine in the memory pane."""
    import platform
    import time

    from kvtop.tui.app import KvtopApp
    from kvtop.tui.start import launch

    path, _svg, _turns, live_chat = live_run
    built = {}
    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: built.setdefault("app", self) and 0)
    assert launch.replay_main(["--end", path]) == 0
    app = built["app"]
    notes: list[str] = []
    notify = app.notify
    app.notify = lambda message, *a, **kw: (notes.append(str(message)), notify(message, *a, **kw))
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(read_trace(path).header["created"]))
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: len(app.turns) == 3 and not app.turn_running, what="replayed turns")
        await pilot.pause(1.5)  # a live app samples memory once a second
        lines = chat_lines(app)
        assert lines[0] == ("system", f"replay of {os.path.basename(path)}, recorded {created} on "
                                      f"{platform.node()}; input is off", "")
        assert lines[1:] == live_chat
        prompt = app.query_one("#prompt")
        assert prompt.disabled and "input is off" in prompt.placeholder
        for key in ("h", "i", "enter"):
            await pilot.press(key)
        await pilot.pause(0.2)
        assert notes.count("this is a replay: input is off (Ctrl+Q quits)") == 1 and prompt.value == ""
        assert len(app.turns) == 3 and app.session.messages[-2].content == QUESTIONS[-1]
        pane = app.query_one(MemoryPane)
        assert pane.sample is None and pane.peak_engine_rss is None  # nothing of this machine
        assert pane.buffers is not None  # llama.cpp's buffers are recorded (the Loaded event)


async def test_replay_memory_pane_says_its_figures_are_not_recorded(live_run, tmp_path, monkeypatch):
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.start import launch

    path = live_run[0]
    built = {}
    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: built.setdefault("app", self) and 0)
    launch.replay_main(["--end", path])
    app = built["app"]
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: len(app.turns) == 3, what="replayed turns")
        text = app.query_one(MemoryPane).render().plain
        assert "not recorded" in text and "sampling" not in text


async def test_replay_at_recorded_speed_takes_the_recorded_time(live_run, tmp_path):
    import time

    path, _svg, turns, _chat = live_run
    trace = read_trace(path)
    app = replay_app(trace, tmp_path, speed=1.0, memory_sample=None)
    t0 = time.monotonic()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: len(app.turns) == 3 and not app.turn_running, what="replayed turns")
    recorded = sum(t.metrics.prefill_s + t.metrics.decode_s for t in turns)
    assert time.monotonic() - t0 >= recorded * 0.9


@pytest.mark.parametrize("damage,message", [
    (lambda lines: lines[:-1] + [lines[-1][: len(lines[-1]) // 2]], "cut short"),
    (lambda lines: [lines[0], "{not json\n"] + lines[1:], "not JSON"),
    (lambda lines: ['{"type": "something"}\n'] + lines[1:], "not a kvtop trace"),
    (lambda lines: [lines[0], '{"type": "event", "event": "Bogus", "data": {}}\n'], "unknown event"),
    (lambda lines: [lines[0].replace('"version": 1', '"version": 99')] + lines[1:], "trace version 99"),
])
def test_corrupted_or_truncated_trace_gives_a_clear_error(live_run, tmp_path, damage, message):
    path = live_run[0]
    with open(path) as fh:
        lines = fh.readlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(damage(lines)))
    with pytest.raises(TraceError, match=message):
        read_trace(str(bad))
    r = subprocess.run([sys.executable, "-m", "kvtop", "replay", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
