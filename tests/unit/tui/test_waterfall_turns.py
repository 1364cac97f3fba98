"""F2 shows the turn in flight (its segments so far, labelled in progress) and any turn of
the session (left/right), and always says which turn it shows."""

import dataclasses
import threading

from helpers import make_app, screen_text, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.tui.turn.waterfall import WaterfallScreen


def _with_timeline(script: list) -> list:
    """A scripted turn whose TurnDone carries the TTFT waterfall, as the engine's does."""
    started = script[0]
    done = script[-1]
    t0 = started.t
    segs = [("template", 0.0, started.template_s), ("tokenize", started.template_s, started.tokenize_s)]
    prev = started.t + 0.003
    for i, p in enumerate(e for e in script if isinstance(e, ev.PrefillProgress)):
        segs.append((f"ubatch {i + 1} ({p.ubatch_tokens} tok)", prev - t0, p.t - prev))
        prev = p.t
    first = next(e for e in script if isinstance(e, ev.TokenEvent))
    segs.append(("first decode+sample", prev - t0, first.t - prev))
    m = dataclasses.replace(done.metrics, timeline=tuple(segs))
    return script[:-1] + [dataclasses.replace(done, metrics=m)]


def _app(tmp_path, smollm_shaped, turns, speed=0.0, hold=None):
    loaded = smollm_loaded(smollm_shaped)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    return make_app(settings, lambda s: ScriptedEngine(s, loaded, turns, speed=speed, max_gap=2.0, hold=hold), tmp_path,
                    live_system=False, write_transcript=False, record_trace=False, refresh=0.25)


async def _send(pilot, text):
    pilot.app.query_one("#prompt").value = text
    await pilot.press("enter")


def _table(app) -> str:
    return str(app.screen.query_one("#waterfall-table").render())


def _title(app) -> str:
    """The waterfall's own heading (the dashboard shows through the dialog); "" in the
    moment the screen recomposes (it does on each poll while a turn runs)."""
    from textual.css.query import NoMatches

    try:
        return str(app.screen.query_one("#waterfall-title").render())
    except NoMatches:
        return ""


async def test_f2_picks_any_turn_of_the_session(tmp_path, smollm_shaped):
    turns = [_with_timeline(scripted_turn(1, 1000.0, 600, 0, ["A", "."])),
             _with_timeline(scripted_turn(2, 2000.0, 1100, 0, ["B", "."]))]
    app = _app(tmp_path, smollm_shaped, turns)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        for i, text in enumerate(["first", "second"]):
            await _send(pilot, text)
            await wait_until(pilot, lambda: len(app.turns) == i + 1 and not app.turn_running, what=f"turn {i + 1}")
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), timeout=5, what="waterfall")
        assert "Turn 2 of 2" in _title(app) and "ubatch 3 (76 tok)" in _table(app)
        await pilot.press("left")
        await wait_until(pilot, lambda: "Turn 1 of 2" in _title(app), timeout=5, what="turn 1 shown")
        assert "first" in _title(app)  # which turn: its number, what was asked
        assert "ubatch 2 (88 tok)" in _table(app) and "ubatch 3" not in _table(app)
        await pilot.press("left")  # no turn before the first: stays
        await pilot.pause()
        assert "Turn 1 of 2" in _title(app)
        await pilot.press("right")
        await wait_until(pilot, lambda: "Turn 2 of 2" in _title(app), timeout=5, what="turn 2 shown")
        assert "←/→" in screen_text(app)  # the keys are shown


async def test_f2_during_a_turn_shows_that_turn_in_progress(tmp_path, smollm_shaped):
    # turn 2 is held after its first micro-batch until F2 has shown it in progress (it was
    # paced a micro-batch every 1.5 s, 4.5 s of waiting, for the keys to land mid-prefill)
    gate = threading.Event()
    first_batch = (lambda e: isinstance(e, ev.PrefillProgress) and e.turn_id == 2 and e.done >= 512, gate)
    slow = scripted_turn(2, 2000.0, 1536, 0, ["B", "."], pp_tok_s=512 / 1.5)
    turns = [_with_timeline(scripted_turn(1, 1000.0, 600, 0, ["A", "."])), _with_timeline(slow)]
    app = _app(tmp_path, smollm_shaped, turns, hold=first_batch)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await _send(pilot, "first")
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn 1")
        await _send(pilot, "second")
        pre = app.query_one("#prefill")
        await wait_until(pilot, lambda: pre.done >= 512, timeout=10, what="first micro-batch of turn 2")
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), timeout=5, what="waterfall")
        title = _title(app)
        assert "Turn 2 of 2" in title and "in progress" in title, title
        assert "512/1,536" in title  # how far the prefill is, of how many tokens
        assert "512 tok" in _table(app)  # the segments so far
        await pilot.press("left")
        await wait_until(pilot, lambda: "Turn 1 of 2" in _title(app), timeout=5, what="turn 1 shown")
        assert "in progress" not in _title(app)
        await pilot.press("right")
        await wait_until(pilot, lambda: "Turn 2 of 2" in _title(app), timeout=5, what="turn 2 shown again")
        assert "in progress" in _title(app)
        gate.set()
        # the turn ends while it is shown: the screen shows it finished
        await wait_until(pilot, lambda: not app.turn_running, timeout=15, what="turn 2 end")
        await wait_until(pilot, lambda: _title(app) and "in progress" not in _title(app), timeout=5,
                         what="turn 2 shown finished")
        title = _title(app)
        assert "Turn 2 of 2" in title and "in progress" not in title and "Time to first token" in title
        assert "ubatch 3 (512 tok)" in _table(app)


async def test_f2_during_decode_says_when_the_first_token_came_and_counts_on(tmp_path, smollm_shaped):
    """A new user saw "prefill done, decoding … the time to first token comes when the
    first character does" for 5 s while the reply streamed: it must move."""
    loaded = smollm_loaded(smollm_shaped)
    slow = scripted_turn(1, 1000.0, 300, 0, [" w"] * 200, pp_tok_s=3000, tg_tok_s=40)  # 5 s of decode
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                   lambda s: ScriptedEngine(s, loaded, [slow], speed=1.0, real_clock=True), tmp_path,
                   live_system=False, write_transcript=False, record_trace=False, refresh=0.25)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await _send(pilot, "a long one")
        await wait_until(pilot, lambda: getattr(app.session.active, "first_token_s", None) is not None, timeout=10, what="first token")
        await pilot.press("f2")
        await wait_until(pilot, lambda: "first token after" in _title(app), timeout=5, what="the live first token")
        first = _title(app)
        assert "in progress" in first and "tok so far" in first
        await wait_until(pilot, lambda: _title(app) not in ("", first), timeout=5, what="the count moving")
        assert app.turn_running and "first token after" in _title(app)


async def test_f2_gives_the_forecast_the_estimate_pane_showed_for_that_turn(tmp_path, smollm_shaped):
    """A new user saw a forecast in the input's border and the Estimate pane, and in F2 a
    "predicted" column of roofline times that agreed with neither."""
    from kvtop.tui.base.format import fmt_seconds
    from kvtop.tui.panes.estimate import EstimatePane

    turns = [_with_timeline(scripted_turn(1, 1000.0, 600, 0, ["A", "."])),
             _with_timeline(scripted_turn(2, 2000.0, 1100, 0, ["B", "."]))]
    app = _app(tmp_path, smollm_shaped, turns)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        shown = []
        for i, text in enumerate(["first", "second"]):
            await _send(pilot, text)
            await wait_until(pilot, lambda: len(app.turns) == i + 1 and not app.turn_running, what=f"turn {i + 1}")
            shown.append(app.query_one(EstimatePane).forecast)
        assert shown[0].basis == "roofline" and shown[1].basis == "calibrated"
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), timeout=5, what="waterfall")
        title = _title(app)
        assert (f"forecast {fmt_seconds(shown[1].ttft_s)} (calibrated on 1 turn, 80% {fmt_seconds(shown[1].ttft_s_low)}–"
                f"{fmt_seconds(shown[1].ttft_s_high)})") in title  # the interval the pane showed, frozen with it
        assert "roofline" in _table(app).splitlines()[0] and "predicted" not in _table(app)
        await pilot.press("left")
        await wait_until(pilot, lambda: "Turn 1 of 2" in _title(app), timeout=5, what="turn 1 shown")
        assert f"forecast {fmt_seconds(shown[0].ttft_s)} (roofline, not calibrated yet)" in _title(app)


def test_a_server_turn_in_flight_starts_with_the_wait_for_the_server_not_kvtop_s_template():
    """A new user's trial, F2 during a --server reply: template and tokenize rows at 0 ms,
    a bogus "prefill +0 tok (to 0)" row (llama-server reports "processed 0" first), and
    952 ms of segments beside a 996 ms first token. The wait for the server's prefill is
    the first segment, as in the finished turn's table."""
    from kvtop.runner.events import TurnStarted
    from kvtop.tui.turn.waterfall import LiveTurn

    started = TurnStarted(1, 39, 0, 2048, "server", None, 0.0, 0.0, None, t=100.044)
    live = LiveTurn("hi", started, ((0, 0.0), (39, 0.952)), first_token_s=0.996, decoded=5, t_submit=100.0)
    segs = live.segments()
    assert [label for label, _s, _dt in segs] == ["network + server queue", "prefill +39 tok (to 39)"]
    assert abs(sum(dt for _l, _s, dt in segs) - 0.996) < 1e-9
    local = TurnStarted(1, 39, 0, 2048, "chatml", None, 0.01, 0.002, None, t=100.0)
    assert [label for label, *_ in LiveTurn("hi", local, ((39, 0.3),), t_submit=99.9).segments()] == \
        ["template", "tokenize", "prefill +39 tok (to 39)"]
