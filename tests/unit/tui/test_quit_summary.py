"""On quit kvtop prints the session's summary, as llama-cli and ``ollama run --verbose``
do: after the app has left the terminal's alternate screen, from the turn records the
panes showed, with the transcript's and the trace's paths; nothing when no model loaded."""

import asyncio
import os

import pytest
from helpers import one_turn
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded


@pytest.fixture
def launch_with(monkeypatch, tmp_path):
    """``launch_with(engine_factory, drive)``: ``kvtop MODEL`` through launch_main, the
    engine replaced and the app run headless by ``drive(pilot)``; (rc, stdout while the
    app ran, the app)."""
    import kvtop.runner.process.parent as parent
    import kvtop.tui.base.collector
    import kvtop.tui.start.run
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.start import launch

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kvtop.tui.start.run.signal, "signal", lambda *a: None)  # not this test process's handlers
    monkeypatch.setattr(kvtop.tui.base.collector, "freeze_startup_objects", lambda: None)
    seen = {}

    def go(factory, drive, capsys, model):
        monkeypatch.setattr(parent, "EngineProcess", factory)

        def run(app, **kw):
            async def headless():
                async with app.run_test(size=(120, 40)) as pilot:
                    await drive(pilot)
                    await pilot.press("ctrl+q")

            asyncio.run(headless())
            seen["during"] = capsys.readouterr().out
            seen["app"] = app
            return app.return_code or 0

        monkeypatch.setattr(KvtopApp, "run", run)
        rc = launch.launch_main([model, "-t", "2"])
        return rc, seen["during"], seen["app"]

    return go


def test_quit_prints_load_prompt_eval_eval_total_and_the_files(launch_with, capsys, smollm_shaped, tmp_path):
    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(1, 1000.0, 30, 0, ["Hello", " there", ",", " friend", "."])]
    footer = {}

    async def drive(pilot):
        await one_turn(pilot, "hi")
        footer["text"] = pilot.app.query("ChatMessage")[-1].footer

    rc, during, app = launch_with(lambda s: ScriptedEngine(s, loaded, turns), drive, capsys, smollm_shaped)
    out = capsys.readouterr().out
    assert rc == 0 and "load time" not in during  # printed after the app ended, not inside it
    m = app.session.turns[0].metrics
    lines = out.splitlines()
    assert lines[0] == "kvtop: 1 turn with SmolLM2-135M-Instruct.Q4_1.gguf"
    assert lines[1] == "       load time =     200.00 ms"  # the Loaded event's load_s
    assert lines[2] == ("prompt eval time =      75.00 ms /    30 tokens (    2.50 ms per token,   "
                        "400.00 tokens per second)")
    assert lines[3].startswith("       eval time =      26.67 ms /     4 runs   (    6.67 ms per token,   150.00")
    assert "150 tok/s" in footer["text"] and m.decode_tok_s == pytest.approx(150.0)  # what the chat showed
    assert lines[4].startswith("      total time =") and lines[4].endswith("/    35 tokens (30 prompt, 5 generated)")
    sessions = tmp_path / "home" / "data" / "sessions"
    transcript, trace = lines[5].removeprefix("transcript: "), lines[6].removeprefix("trace: ")
    assert os.path.dirname(transcript) == str(sessions) and os.path.isfile(transcript)
    assert os.path.dirname(trace) == str(sessions) and open(trace).readline().startswith('{"type": "kvtop-trace"')
    assert len(lines) == 7


def test_nothing_is_printed_when_no_model_loaded(launch_with, capsys, smollm_shaped):
    loaded = smollm_loaded(smollm_shaped)

    async def drive(pilot):
        await pilot.pause(0.3)  # quit while the model is still loading

    rc, _during, app = launch_with(lambda s: ScriptedEngine(s, loaded, [], load_s=30), drive, capsys, smollm_shaped)
    assert rc == 0 and app.session.loaded is None and capsys.readouterr().out == ""
