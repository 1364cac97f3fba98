"""The prompt's border is never stale: a draft's forecast is made again when a turn
ends, when the chat changes (Ctrl+L, a context shift, --resume) and when what the
forecast rests on changes (load, restart, re-probe); and its "does not fit" is the
turn's own refusal. A new user saw "133 tok → TTFT ≈ 413 ms; fits" stay on after the
turn it was typed during had ended, then "203 tok, 19 new: does not fit in 256" for
a turn that then ran."""

import dataclasses
import threading
from types import SimpleNamespace

from helpers import make_app, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings


def _app(tmp_path, model, turns, speed=0.0, n_ctx=4096, load_gate=None, **kw):
    loaded = dataclasses.replace(smollm_loaded(model), n_ctx=n_ctx)
    return make_app(Settings(model, n_ctx=n_ctx, n_threads=2),
                    lambda s: ScriptedEngine(s, loaded, turns, speed=speed, real_clock=speed > 0, load_gate=load_gate),
                    tmp_path, live_system=False, write_transcript=False, record_trace=False, **kw)


def _border(app) -> str:
    return str(app.query_one("#prompt").border_subtitle or "")


async def _type(pilot, text: str) -> None:
    inp = pilot.app.query_one("#prompt")
    inp.focus()
    inp.insert_text_at_cursor(text)
    await pilot.pause()


def _size(messages) -> int:
    """The scripted engine's tokenizer: 4 tokens of template per message plus one per word."""
    return sum(4 + len(text.split()) for text in messages)


async def test_a_draft_typed_during_a_turn_is_forecast_again_when_it_ends(tmp_path, smollm_shaped):
    reply = ["Tides", " rise", " and", " fall", "."] + [" again"] * 30
    turn = scripted_turn(1, 1000.0, 900, 0, reply, pp_tok_s=900, tg_tok_s=30)  # ~1 s prefill, ~1 s decode
    app = _app(tmp_path, smollm_shaped, [turn], speed=1.0)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.estimates.calibration is not None, what="load")
        await _type(pilot, "Tell me about tides")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turn_running, what="the turn")
        await _type(pilot, "and the moon please")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=20, what="the turn's end")
        text = "".join(reply)
        after = _size(["Tell me about tides", text, "and the moon please"])  # the reply is in the prompt now
        before = _size(["Tell me about tides", "and the moon please"])  # what the chat held while typing
        await wait_until(pilot, lambda: _border(app).startswith(f"{after} tok"), timeout=5,
                         what=f"the border counting the reply ({after} tokens)")
        await pilot.pause(0.3)  # the answer to the measure sent during the turn must not come back over it
        assert _border(app).startswith(f"{after} tok") and not _border(app).startswith(f"{before} tok")


async def test_ctrl_l_measures_the_draft_against_the_empty_chat(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped, [scripted_turn(1, 1000.0, 40, 0, ["Yes", "."])])
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.estimates.calibration is not None, what="load")
        await _type(pilot, "first question here")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="the turn")
        await _type(pilot, "next")
        with_chat = _size(["first question here", "Yes.", "next"])
        await wait_until(pilot, lambda: _border(app).startswith(f"{with_chat} tok"), timeout=5, what="the draft")
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: _border(app).startswith(f"{_size(['next'])} tok"), timeout=5,
                         what="the draft alone after Ctrl+L")


async def test_a_draft_typed_before_the_model_loaded_is_forecast_once_it_has(tmp_path, smollm_shaped):
    """--resume with a slow load: the restored chat is in the prompt the draft joins."""
    resumed = [{"role": "user", "content": "old question"}, {"role": "assistant", "content": "old answer"}]
    loading = threading.Event()  # the load ends when the test says, however busy the machine
    app = _app(tmp_path, smollm_shaped, [], load_gate=loading, resume_messages=resumed)
    async with app.run_test(size=(200, 50)) as pilot:
        await _type(pilot, "new one")
        await pilot.pause(0.2)
        assert app.loaded is None and _border(app) == ""  # nothing to forecast with yet
        loading.set()
        expected = _size(["old question", "old answer", "new one"])
        await wait_until(pilot, lambda: _border(app).startswith(f"{expected} tok"), timeout=10,
                         what="the forecast once loaded")


async def test_the_border_fits_what_the_turn_runs_and_refuses_what_it_refuses(tmp_path, smollm_shaped):
    """-c 256: 224 tokens run (the reply gets the 32 cells left), 260 are refused."""
    app = _app(tmp_path, smollm_shaped, [scripted_turn(1, 1000.0, 224, 0, ["ok"])], n_ctx=256)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.estimates.calibration is not None, what="load")
        await _type(pilot, "word " * 220)
        await wait_until(pilot, lambda: "fit" in _border(app), timeout=5, what="a forecast")
        assert _border(app).startswith("224 tok") and _border(app).endswith("; fits"), _border(app)
        assert "reply of 32" in _border(app)  # the room the context has left, not 64
        app.query_one("#prompt").value = ""
        await _type(pilot, "word " * 256)
        await wait_until(pilot, lambda: "does not fit" in _border(app), timeout=5, what="the refusal forecast")


def test_does_not_fit_is_the_engines_refusal():
    """One function decides for the border and the engine, at every size around n_ctx."""
    from kvtop.runner.calibration.forecast import Forecast
    from kvtop.runner.engine.engine import Engine
    from kvtop.tui.turn.forecasting import forecast_line

    engine = SimpleNamespace(n_ctx=256)
    for n in range(180, 300):
        fc = Forecast(n, 0, max(256 - n, 0), 0.5, 0.2, 500.0, 50.0, 1.0, "roofline", 0)
        said_no = "does not fit" in forecast_line(fc, 256, 200)
        refused = Engine._refusal(engine, 1, n) is not None
        assert said_no == refused, n
