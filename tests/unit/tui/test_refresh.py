"""The redraw pace during a turn: slower when llama.cpp's threads take every core,
chosen by --refresh otherwise, shown to the user, and obeyed by the bridge."""

import random

from helpers import make_app, screen_text, wait_until
from rich.cells import cell_len
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded
from textual.content import Content

from kvtop.runner import events as ev
from kvtop.runner.pacing import chart_interval, prefill_interval, refresh_interval
from kvtop.runner.settings import Settings
from kvtop.tui.base import messages as msg
from kvtop.tui.base.decode_series import MIN_WINDOW
from kvtop.tui.base.screens import HelpScreen
from kvtop.tui.events.bridge import TurnBridge
from kvtop.tui.panes.base import PaneWidget
from kvtop.tui.panes.decode import DecodePane


def test_every_core_decoding_means_one_redraw_a_second():
    assert refresh_interval(None, 2, 2)[0] == 1.0
    assert "2 decode threads on 2 cores" in refresh_interval(None, 2, 2)[1]
    assert refresh_interval(None, 4, 2)[0] == 1.0  # oversubscribed: still the slow pace


def test_a_spare_core_means_four_redraws_a_second():
    s, why = refresh_interval(None, 8, 16)
    assert s == 0.25 and "8 of 16 cores spare" in why


def test_refresh_flag_wins_within_bounds():
    assert refresh_interval(0.5, 2, 2) == (0.5, "set by --refresh")
    assert refresh_interval(0.001, 2, 2)[0] == 0.25  # token events come in 0.25 s batches
    assert refresh_interval(1000, 2, 2)[0] == 10.0


def test_chart_and_prefill_follow_the_refresh():
    assert chart_interval(1.0) == 4.0 and chart_interval(0.1) == 1.0
    assert prefill_interval(1.0) == 0.5 and prefill_interval(0.25) == 0.25


def run_bridge(interval: float, n_tokens: int, tg_tok_s: float = 20.0):
    """Feed one scripted turn through a bridge whose clock is the events' own time."""
    pieces = [f" w{i}" for i in range(n_tokens)]
    events = scripted_turn(1, 100.0, 30, 0, pieces, tg_tok_s=tg_tok_s)
    now = [0.0]
    posted = []
    bridge = TurnBridge(posted.append, interval=interval, clock=lambda: now[0])
    for e in events:
        now[0] = e.t if hasattr(e, "t") else now[0]
        bridge(e)
    return pieces, posted


def test_the_bridge_posts_decode_updates_at_the_chosen_pace():
    # 60 tokens at 20 tok/s: 3 s of decode
    _, slow = run_bridge(1.0, 60)
    _, fast = run_bridge(0.25, 60)
    n_slow = sum(isinstance(m, msg.DecodeUpdate) for m in slow)
    n_fast = sum(isinstance(m, msg.DecodeUpdate) for m in fast)
    assert 3 <= n_slow <= 4  # one a second, plus the last one at the end
    assert 11 <= n_fast <= 13


def test_the_last_update_carries_every_token_whatever_the_pace():
    pieces, posted = run_bridge(1.0, 45)
    updates = [m for m in posted if isinstance(m, msg.DecodeUpdate)]
    assert updates[-1].text == "".join(pieces)
    assert updates[-1].pos == 30 + 44
    done = posted[-1]
    assert isinstance(done, msg.TurnFinished) and isinstance(done.result, ev.TurnDone)
    assert len(done.series) == 45 - MIN_WINDOW  # a rate for every token once its window has MIN_WINDOW gaps


async def test_the_chosen_refresh_is_shown_and_paces_the_chart(tmp_path, smollm_shaped):
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(settings, lambda s: ScriptedEngine(s, loaded, [scripted_turn(1, 1000.0, 30, 0, ["Hi"])]),
                   root=tmp_path, live_system=False, write_transcript=False, refresh=0.5)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.pause()
        assert "refresh 0.5 s" in screen_text(app).split("\n", 1)[0]
        assert app.query_one(DecodePane).chart_interval == 2.0
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        app.screen.query_one("#help-box").scroll_end(animate=False)  # the pace is its last line
        await pilot.pause()
        assert "every 0.5 s while a turn runs (set by --refresh)" in screen_text(app)


async def live_updates(tmp_path, smollm_shaped, refresh: float) -> int:
    """Decode updates the app draws during a 1.5 s reply played in real time."""
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(smollm_shaped)
    turn = scripted_turn(1, 1000.0, 30, 0, [f" w{i}" for i in range(30)], tg_tok_s=20.0)
    app = make_app(settings, lambda s: ScriptedEngine(s, loaded, [turn], speed=1.0),
                   root=tmp_path, live_system=False, write_transcript=False, refresh=refresh)
    drawn = []
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(DecodePane)
        show = pane.update_live
        pane.update_live = lambda u, now: (drawn.append(u.pos), show(u, now))
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.query_one("#prompt").value = "hi"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        assert "w29" in screen_text(app)
    return len(drawn)


async def test_the_app_redraws_decode_at_its_refresh(tmp_path, smollm_shaped):
    assert await live_updates(tmp_path / "slow", smollm_shaped, 5.0) == 1  # only the turn's last one
    assert await live_updates(tmp_path / "fast", smollm_shaped, 0.25) >= 4


def test_the_counted_height_of_a_pane_equals_its_wrapped_height():
    """``wrapped_height`` counts lines that fit instead of wrapping them: it must give
    the same answer as wrapping, or panes would be cut off or leave gaps."""
    rng = random.Random(7)
    words = ["a", "bb", "cell", "€€", "日本語", "x" * 12, " ", "  ", "\n"]

    class Probe(PaneWidget):
        text = ""
        width = 0

        @property
        def content_region(self):
            from textual.geometry import Region
            return Region(0, 0, self.width, 1)

        def render(self):
            return Content(self.text)

    p = Probe()
    fits = 0
    for _ in range(2000):
        p.text = "".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        p.width = rng.choice([1, 4, 10, 30])
        expected = len(Content(p.text).wrap(p.width))
        assert p.wrapped_height() == expected, (p.text, p.width)
        fits += all(cell_len(line) <= p.width for line in p.text.split("\n"))
    assert fits > 200  # the counted path was exercised, not only the wrapping one


async def test_the_chart_draws_half_an_interval_into_a_turn_then_every_interval(tmp_path, smollm_shaped):
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                   lambda s: ScriptedEngine(s, smollm_loaded(smollm_shaped), []),
                   root=tmp_path, live_system=False, write_transcript=False, refresh=1.0)
    async with app.run_test(size=(160, 50)) as pilot:
        # the dashboard sizes the chart first (tui/dashboard.py), redrawing it: let it settle
        for _ in range(3):
            await wait_until(pilot, lambda: not app.dash._fit_pending, what="the dashboard's plan")
            await pilot.pause(0.1)
        pane = app.query_one(DecodePane)
        drawn = []
        pane._draw_chart = lambda: drawn.append(pane.pos)
        pane.begin(100.0)
        for i, t in enumerate([100.5, 101.0, 102.0, 103.0, 104.0, 105.0, 106.0]):
            u = msg.DecodeUpdate(1, "x", 40 + i, 150.0, ((40 + i, 150.0),))
            pane.update_live(u, t)
        await pilot.pause()
        # interval 4 s: first 2 s into the turn (pos 42 at t=102), then 4 s later (pos 46 at t=106)
        assert drawn == [42, 46]
