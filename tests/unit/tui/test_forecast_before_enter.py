"""The forecast before Enter (the prompt's border) and at a turn's start (the Estimate
pane's forecast column), on the real app and the scripted engine: roofline until a
turn has run, calibrated after, kept across runs in the cache folder."""

import glob
import json
import math
import os

import pytest
from helpers import make_app, screen_text, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.tui.panes.estimate import EstimatePane


def _app(tmp_path, model, turns, speed=0.0):
    loaded = smollm_loaded(model)
    return make_app(Settings(model, n_ctx=4096, n_threads=2),
                    lambda s: ScriptedEngine(s, loaded, turns, speed=speed, real_clock=speed > 0),
                    tmp_path, live_system=False, write_transcript=False)


def _border(app) -> str:
    return str(app.query_one("#prompt").border_subtitle or "")


def _basis(app) -> str:
    return str(app.query_one("#prompt").border_title or "")


async def _loaded(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None and app.estimates.calibration is not None, what="load")


async def _one_turn(pilot, text: str) -> None:
    """Load, type ``text`` as a user would, send it, wait for the turn's end."""
    app = pilot.app
    await _loaded(pilot)
    await _type(pilot, text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")


async def _type(pilot, text: str) -> None:
    app = pilot.app
    app.query_one("#prompt").focus()
    app.query_one("#prompt").insert_text_at_cursor(text)  # as typing or a paste would: Input.Changed
    await pilot.pause()


async def test_a_draft_is_forecast_from_the_roofline_then_from_the_calibration(tmp_path, smollm_shaped):
    slow = scripted_turn(1, 1000.0, 1200, 0, ["Tides", " rise", "."] + [" x"] * 20, pp_tok_s=1200, tg_tok_s=60)
    app = _app(tmp_path, smollm_shaped, [slow], speed=1.0)
    async with app.run_test(size=(200, 50)) as pilot:
        await _loaded(pilot)
        await _type(pilot, "Tell me about tides")
        # the scripted tokenizer: 4 tokens of template + 4 words
        await wait_until(pilot, lambda: "TTFT ≈" in _border(app), timeout=5, what="the forecast in the border")
        # the chat column is 76 wide here: the border says what fits, most important first
        assert _border(app).startswith("8 tok, 8 new → TTFT ≈")  # the long form needs more than 72 columns
        assert "reply of 256 ≈" in _border(app) and _border(app).endswith("; fits")
        assert _basis(app) == "forecast: roofline (not calibrated yet)"

        await pilot.press("enter")
        assert _border(app) == "" and _basis(app) == ""  # the draft was sent: its forecast no longer applies
        pane = app.query_one(EstimatePane)
        await wait_until(pilot, lambda: pane.forecast is not None, timeout=5, what="the turn's forecast")
        assert app.turn_running, "the forecast must show when the turn starts, not when it ends"
        assert pane.forecast.prompt_tokens == 1200 and pane.forecast.basis == "roofline"
        assert "forecast: roofline (not calibrated yet)" in screen_text(app)
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=20, what="the turn")

        files = glob.glob(os.path.join(tmp_path, "cache", "calibration", "v2", "*.json"))
        assert len(files) == 1 and json.load(open(files[0]))["turns"] == 1
        await _type(pilot, "And the moon?")
        await wait_until(pilot, lambda: _basis(app).startswith("forecast: calibrated on 1 turn; TTFT 80%: "), timeout=5,
                         what="calibrated forecast")
        assert _border(app).startswith("41 tok, 7 new")  # 8 + 26 of the first exchange are cached


async def test_a_draft_that_does_not_fit_says_so_before_enter(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped, [])
    async with app.run_test(size=(200, 50)) as pilot:
        await _loaded(pilot)
        await _type(pilot, "word " * 4100)  # more than the context: the engine refuses it
        await wait_until(pilot, lambda: "does not fit" in _border(app), timeout=5, what="the refusal forecast")
        assert _border(app).startswith("4,104 tok") and "does not fit" in _border(app)


async def test_a_file_draft_is_forecast_and_a_fifo_is_named(tmp_path, smollm_shaped):
    text = tmp_path / "q.txt"
    text.write_text("one two three four five six")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    app = _app(tmp_path, smollm_shaped, [])
    async with app.run_test(size=(200, 50)) as pilot:
        await _loaded(pilot)
        await _type(pilot, f"/file {text}")
        await wait_until(pilot, lambda: _border(app).startswith("10 tok"), timeout=5, what="the file's forecast")
        app.query_one("#prompt").value = ""
        await _type(pilot, f"/file {fifo}")
        await wait_until(pilot, lambda: "FIFO" in _border(app) or "fifo" in _border(app).lower(), timeout=5,
                         what="the FIFO named")


def test_the_border_line_keeps_what_matters_most_as_it_narrows():
    from kvtop.runner.calibration.forecast import Forecast
    from kvtop.tui.turn.forecasting import forecast_basis_line, forecast_line

    fc = Forecast(412, 375, 256, 0.42, 0.3, 123.0, 90.0, 3.1, "calibrated", 7)
    assert forecast_line(fc, 4096, 200) == ("412 tokens, 37 new after the cached prefix → TTFT ≈ 420 ms, "
                                            "reply of 256 ≈ 3.10 s; fits")
    assert forecast_line(fc, 4096, 60) == "412 tok, 37 new → TTFT ≈ 420 ms, reply of 256 ≈ 3.10 s; fits"
    assert forecast_line(fc, 4096, 57) == "412 tok, 37 new → TTFT ≈ 420 ms, reply ≈ 3.10 s; fits"
    assert forecast_line(fc, 4096, 50) == "412 tok, 37 new → TTFT ≈ 420 ms; fits"
    assert forecast_line(fc, 4096, 32) == "412 tok → TTFT ≈ 420 ms; fits"  # 80x24: the count stays
    assert forecast_line(fc, 4096, 24) == "TTFT ≈ 420 ms; fits"
    assert forecast_line(fc, 4096, 16) == "TTFT ≈ 420 ms"
    assert forecast_basis_line(fc, 80) == "forecast: calibrated on 7 turns" and forecast_basis_line(fc, 12) == "calibrated"
    assert forecast_line(fc, 400, 200) == "412 tokens, 37 new after the cached prefix: does not fit: the context holds 400"
    assert forecast_line(fc, 400, 40) == "412 tok, 37 new: does not fit in 400"
    assert forecast_line(fc, 600, 200).endswith("; fits")  # the engine runs it: the reply gets what is left


async def test_the_estimate_fills_its_measured_column_while_the_turn_runs(tmp_path, smollm_shaped):
    slow = scripted_turn(1, 1000.0, 1024, 0, [" w"] * 120, pp_tok_s=1024, tg_tok_s=40)  # 3 s of decode
    app = _app(tmp_path, smollm_shaped, [slow], speed=1.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await _loaded(pilot)
        await _type(pilot, "go")
        await pilot.press("enter")
        pane = app.query_one(EstimatePane)
        await wait_until(pilot, lambda: pane.live and pane.live.get("decode"), timeout=10, what="live decode rate")
        assert app.turn_running
        live = dict(pane.live)
        # the live figures are the turn's own: prefill from the engine's stamps, decode and
        # TTFT on arrival (a busy machine delays arrival: room for that, not for N/A or 0)
        assert abs(live["prefill"] / 1024 - 1) < 0.05 and 0.5 < live["decode"] / 40 < 1.5
        assert 0.9 < live["ttft"] < 5  # 1 s of prefill, then the first token (script timing)
        row = next(line for line in pane.render().plain.split("\n") if line.startswith("tg tok/s"))
        assert row.split()[-2] == f"{live['decode']:.1f}"  # the measured column shows it, not N/A
        await wait_until(pilot, lambda: not app.turn_running, timeout=15, what="turn end")
        assert pane.live is None  # the finished turn's rows replace the live figures


async def test_the_turns_forecast_is_in_the_trace_and_a_replay_shows_it(tmp_path, smollm_shaped):
    from kvtop.runner.records.trace import TraceError, read_trace
    from kvtop.tui.panes.estimate import EstimatePane as Pane

    turn = scripted_turn(1, 1000.0, 700, 0, ["Hi"] * 8, pp_tok_s=900, tg_tok_s=80)
    app = _app(tmp_path, smollm_shaped, [turn])
    async with app.run_test(size=(160, 50)) as pilot:
        await _one_turn(pilot, "hello")
        shown = app.query_one(Pane).forecast
    (path,) = glob.glob(os.path.join(tmp_path, "data", "sessions", "trace-*.jsonl"))
    trace = read_trace(path)
    (fc,) = [obj for kind, obj in trace.records if kind == "forecast"]
    assert fc == shown and fc.prompt_tokens == 700 and fc.basis == "roofline"

    from helpers import make_app as make

    from kvtop.runner.records.replay import ReplayEngine

    replay = make(trace.settings(), lambda s: ReplayEngine(trace, speed=0.0), tmp_path / "r", live_system=False,
                  write_transcript=False, record_trace=False, facts=trace.facts, hardware=trace.hardware)
    async with replay.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: replay.turns and not replay.turn_running, what="replayed turn")
        await wait_until(pilot, lambda: replay.query_one(Pane).forecast == shown, timeout=5, what="recorded forecast")

    lines = open(path).read().splitlines()
    bad = [line.replace('"ttft_s": ', '"ttft_s": -') if '"type": "forecast"' in line else line for line in lines]
    open(path, "w").write("\n".join(bad) + "\n")
    try:
        read_trace(path)
        raise AssertionError("a negative forecast time was accepted")
    except TraceError as exc:
        assert "forecast ttft_s" in str(exc)


async def test_the_border_says_the_draft_fits_at_160_columns(tmp_path, smollm_shaped):
    """A new user at 160x48 (n_ctx 4096) never saw "fits": the wide layout's input is
    ~57 columns and the line that fitted there had dropped it."""
    app = _app(tmp_path, smollm_shaped, [])
    async with app.run_test(size=(160, 48)) as pilot:
        await _loaded(pilot)
        await _type(pilot, "Tell me about tides")
        await wait_until(pilot, lambda: "TTFT ≈" in _border(app), timeout=5, what="the forecast in the border")
        assert _border(app).endswith("; fits") and "reply" in _border(app)


async def test_a_busy_turn_calibrates_at_its_load_and_one_whose_load_changed_is_refused_by_name(tmp_path,
                                                                                                 smollm_shaped):
    """Issue 35: every turn on a shared machine was refused ("other processes used 66%…")
    and the forecast stayed the roofline. A turn at a steady load is a sample at that
    load; one whose load changed so much that no single price fits is left out, and the
    app says which turn and why."""
    from kvtop.runner.calibration.pace import TurnLoad

    turns = [scripted_turn(1, 1000.0, 300, 0, ["A", "."]), scripted_turn(2, 2000.0, 300, 0, ["B", "."])]
    app = _app(tmp_path, smollm_shaped, turns)
    loads = iter([TurnLoad(1.2, 2, (1.1, 1.2, 1.3)), TurnLoad(1.0, 2, (0.0, 0.1, 1.9, 2.0))])

    def share():
        app.cpu_watch.last_turn_load = load = next(loads)
        return load.share

    async with app.run_test(size=(160, 48)) as pilot:
        app.cpu_watch.turn_others_share = share
        notices = []
        real_notify = app.notify
        app.notify = lambda text, **kw: (notices.append(str(text)), real_notify(text, **kw))[1]
        await _one_turn(pilot, "First, while a build ran.")
        (path,) = glob.glob(os.path.join(tmp_path, "cache", "calibration", "v2", "*.json"))
        data = json.load(open(path))
        assert data["turns"] == 1 and data["prefill"][0][3] == 1.2  # the cores others held, kept with it
        assert not any("not added" in n for n in notices), notices
        await _one_turn(pilot, "Second, a hog started halfway.")
        assert json.load(open(path))["turns"] == 1
        assert any(n.startswith("Turn 2 was not added to the forecast's calibration: the load changed while it ran "
                                "(other processes used 0% to 100% of the CPU)") for n in notices), notices


async def test_a_turn_is_compared_with_the_forecast_frozen_at_enter_and_calibrates_only_after(tmp_path, smollm_shaped):
    """Issue 35 item 3: a turn's Estimate row read "tg tok/s 38.5 38.5 1.00x", its
    forecast rebuilt from the turn it was compared with. The forecast the border shows at
    Enter is frozen: the pane, the trace and the calibration's residual use that one."""
    turns = [scripted_turn(1, 1000.0, 600, 0, ["A"] * 10, pp_tok_s=900, tg_tok_s=80)]
    app = _app(tmp_path, smollm_shaped, turns)
    async with app.run_test(size=(200, 50)) as pilot:
        await _one_turn(pilot, "First.")
        await _type(pilot, "Second.")
        await wait_until(pilot, lambda: _basis(app).startswith("forecast: calibrated on 1 turn"), timeout=5,
                         what="the calibrated draft")
        n, cached, _ = app.forecast_border.measured_now()  # the engine plays the draft as measured, at half speed
        app.session.engine.turn_scripts.append(scripted_turn(2, 2000.0, n, cached, ["B"] * 10, pp_tok_s=450,
                                                             tg_tok_s=40))
        made, sent = [], []
        real = app.estimates.forecast
        app.estimates.forecast = lambda *a, **kw: (made.append(real(*a, **kw)), sent.append(app.session.active),
                                                   made[-1])[2]
        await pilot.press("enter")
        pane = app.query_one(EstimatePane)
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, what="the second turn")
        assert len(made) == 1 and sent == [None], "one forecast, at Enter: none built once the turn had started"
        frozen = made[0]
        assert pane.forecast is frozen and app.turns[-1].forecast is frozen and frozen.n_turns == 1
        assert app.estimates.calibration.turns == 2  # the turn calibrated, after
        (residual,) = app.estimates.calibration.samples.residuals
        assert residual[1] == pytest.approx(math.log(frozen.decode_tok_s / 40), abs=0.02)  # against the frozen one
        assert pane.forecast.decode_tok_s / 40 > 1.5  # the pane compares with it, not with a rebuilt one
