"""The decode chart as a user reads it: whole numbers on the axes, the legend under the
plot, a y range in which the measured series can be read, and a stall drawn as a
marked break instead of a drop to 0 tok/s.

Each test runs the real app on the scripted engine and reads the chart widget's
rendered text (the plot) and the screen (the legend)."""

import dataclasses
import re

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.tui.base.decode_series import DecodeSeries

INTEGER = re.compile(r"^\d{1,3}(,\d{3})*$")


def with_stall(events, at: int, seconds: float):
    """The turn's events with the stream paused ``seconds`` before token ``at``."""
    return [dataclasses.replace(e, t=e.t + seconds)
            if isinstance(e, ev.TurnDone) or (isinstance(e, ev.TokenEvent) and e.index >= at) else e
            for e in events]


async def chart_after(tmp_path, model: str, turn, size=(100, 40)) -> tuple[list[str], str]:
    """(the chart's lines, the screen's text) once ``turn`` has been played."""
    settings = Settings(model, n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(model)
    app = make_app(settings, lambda s: ScriptedEngine(s, loaded, [turn]), tmp_path, live_system=False,
                   write_transcript=False)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.facts is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.pause(0.2)
        return app.query_one("#decode-chart").render().plain.splitlines(), squash(screen_text(app))


def squash(text: str) -> str:
    """Text without whitespace: the screen's text runs are read without the blanks between them."""
    return re.sub(r"\s+", "", text)


def plot_rows(chart: list[str]) -> list[str]:
    top = next(i for i, line in enumerate(chart) if "┌" in line)
    bottom = next(i for i, line in enumerate(chart) if "└" in line)
    return chart[top + 1:bottom]


def braille_rows(chart: list[str]) -> list[int]:
    """Indexes (from the top of the plot) of the rows a line is drawn through."""
    return [i for i, row in enumerate(plot_rows(chart)) if any("\u2801" <= c <= "\u28ff" for c in row)]


def x_labels(chart: list[str]) -> list[str]:
    bottom = next(i for i, line in enumerate(chart) if "└" in line)
    return chart[bottom + 1].split()


def y_labels(chart: list[str]) -> list[str]:
    return [row.split("┤")[0].strip() for row in plot_rows(chart) if "┤" in row]


async def test_both_axes_are_labelled_with_whole_numbers(tmp_path, smollm_shaped):
    """Six tokens span positions 41 to 45: plotext labelled them "41.0 42.2 43.5"."""
    chart, _ = await chart_after(tmp_path, smollm_shaped, scripted_turn(1, 1000.0, 40, 0, [" w"] * 6))
    xs, ys = x_labels(chart), y_labels(chart)
    assert len(xs) >= 2 and len(ys) >= 2
    assert all(INTEGER.match(t) for t in xs + ys), (xs, ys)


async def test_the_legend_is_a_line_under_the_plot_not_drawn_over_it(tmp_path, smollm_shaped):
    chart, screen = await chart_after(tmp_path, smollm_shaped, scripted_turn(1, 1000.0, 40, 0, [" w"] * 40))
    assert not any("measured" in line or "ceiling" in line for line in chart)
    assert squash("━ measured  ━ bandwidth ceiling") in screen


async def test_a_series_far_under_the_ceiling_is_scaled_to_be_read(tmp_path, smollm_shaped):
    """12 tok/s under a ~308 tok/s bandwidth ceiling: scaled to the ceiling, the series
    lay on the bottom row; now it fills the plot and the legend states the ceiling."""
    chart, screen = await chart_after(tmp_path, smollm_shaped,
                                      scripted_turn(1, 1000.0, 40, 0, [" w"] * 60, tg_tok_s=12.0), (160, 50))
    rows = braille_rows(chart)
    assert rows and max(rows) < len(plot_rows(chart)) / 2, chart  # in the upper half
    assert re.search(r"↑bandwidthceiling\d+xthemeasuredrate:abovethechart", screen)


async def test_a_stall_is_a_marked_break_not_a_drop_to_zero(tmp_path, smollm_shaped):
    """A 3 s pause after 40 tokens at 150 tok/s: every rate window across it read about
    2.6 tok/s, so the line fell to the bottom of the plot for 8 tokens."""
    turn = with_stall(scripted_turn(1, 1000.0, 40, 0, [" w"] * 80, tg_tok_s=150.0), 40, 3.0)
    chart, screen = await chart_after(tmp_path, smollm_shaped, turn, (160, 50))
    rows = plot_rows(chart)
    assert max(braille_rows(chart)) < len(rows) * 2 / 3, chart  # nothing near 0 tok/s
    empty = [row for i, row in enumerate(rows) if i not in braille_rows(chart)]
    assert empty and all("│" in row.rstrip()[4:-1] for row in empty)  # the marker runs down the plot
    assert squash("│ 1 stall of 3.01 s at 80") in screen  # the token after the pause is at KV position 80


def test_jitter_is_not_a_stall_and_the_rate_restarts_after_one():
    s = DecodeSeries()
    t = 0.0
    for i in range(40):  # gaps of 6 and 8 ms, and one of 60 ms: under the 100 ms floor
        t += 0.06 if i == 20 else (0.006 if i % 2 else 0.008)
        s.add(100 + i, t)
    assert s.stalls == []
    s.add(140, t + 2.0)
    assert s.stalls == [(140, 2.0)] and s.points[-1][0] == 139  # no point spans the pause
    for i in range(1, 4):
        s.add(140 + i, t + 2.0 + 0.007 * i)
    # the rate is measured again from the pause on, once it has three gaps
    assert s.points[-1][0] == 143 and abs(s.points[-1][1] - 1 / 0.007) < 1


def test_the_first_tokens_gap_does_not_start_the_line_far_below_the_rate():
    """The first decoded token waits for llama.cpp to build its one-token graph: a rate
    over that gap alone started the chart's line at half the turn's rate (seen at 160x48)."""
    s = DecodeSeries()
    s.add(40, 0.0)
    s.add(41, 0.030)  # the first decode: three times a token's 10 ms
    t = 0.030
    for pos in range(42, 60):
        t += 0.010
        s.add(pos, t)
    first = s.points[0][1]
    assert s.points[0][0] == 43 and first >= 0.5 * 100, s.points[:3]
    assert abs(s.points[-1][1] - 100) < 1


def test_the_ceiling_above_the_scale_is_compared_with_the_latest_rate():
    """The legend's "Nx" divided the ceiling at the last position by the highest point
    drawn (early, at a shallow depth), so it understated the gap at the current depth."""
    from kvtop.tui.panes.decode_chart import legend, plan_chart

    series = [(100 + i, 20.0 - i / 4) for i in range(41)]  # 20 tok/s falling to 10
    plan = plan_chart(series, [], lambda depth: 300.0, 80)
    text = legend(plan).plain
    assert "bandwidth ceiling  30x the measured rate: above the chart" in text, text


def test_a_turn_that_slows_down_for_good_is_measured_at_its_new_pace():
    """Another process took the cores: from token 40 on, a token every 2.5 s instead of
    every 10 ms. Every gap was called a stall, no point was made again, and the pane
    said the last fast rate ("31.7 tok/s live") for half a minute."""
    s = DecodeSeries()
    t = 0.0
    for pos in range(100, 140):
        t += 0.010
        s.add(pos, t)
    for pos in range(140, 150):
        t += 2.5
        s.add(pos, t)
    assert abs(s.rate - 0.4) < 0.01, s.rate  # the live rate follows the slowdown
    assert s.stalls == []  # a slowdown, not pauses: nothing to mark
    assert s.points[-1][0] == 149
    # and a real pause afterwards is still a pause
    for pos in range(150, 170):
        t += 2.5
        s.add(pos, t)
    s.add(170, t + 60.0)
    assert s.stalls == [(170, 60.0)]


async def test_a_decode_with_no_token_for_seconds_says_so_not_its_last_rate(tmp_path, smollm_shaped):
    """A hard stall (a swap-in, an engine stopped) sends no update at all: the pane kept
    saying its last rate as "live". The once-a-second check says how long it has waited."""
    import time

    from kvtop.tui.panes.decode import DecodePane

    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(smollm_shaped)
    turn = scripted_turn(1, 1000.0, 40, 0, [" w"] * 200, tg_tok_s=20.0)
    app = make_app(settings, lambda s: ScriptedEngine(s, loaded, [turn], speed=1.0, real_clock=True), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Hi")
        pane = app.query_one(DecodePane)
        await wait_until(pilot, lambda: pane.state == "decoding" and pane.rate, timeout=10, what="decoding")
        pane.note_waiting(time.monotonic() + 5.0, 3.0)  # as the check would, 5 s after the last update
        await pilot.pause()
        assert "notokenfor5" in squash(screen_text(app)) and "tok/slive" not in squash(screen_text(app))
        await wait_until(pilot, lambda: pane.waiting_s is None, timeout=5, what="the next token")
        await wait_until(pilot, lambda: "tok/slive" in squash(screen_text(app)), timeout=5, what="the live rate again")
        pane.note_waiting(time.monotonic() + 1.0, 3.0)  # a second is no stall
        assert pane.waiting_s is None


def test_a_speculative_pass_s_tokens_are_one_arrival_not_250000_tok_s():
    """A verify pass hands over 12 tokens 20 µs apart, a pass every 0.6 s (20 tok/s): the
    chart read 250,000 tok/s inside a pass and marked each pass's wait as a stall."""
    from kvtop.tui.base.decode_series import DecodeSeries

    series, t, pos = DecodeSeries(), 0.0, 100
    for _ in range(10):
        t += 0.6
        for k in range(12):
            series.add(pos, t + k * 20e-6)
            pos += 1
    rates = [r for _, r in series.points]
    assert rates and max(rates) < 60, max(rates)  # 12 tokens a 0.6 s pass: about 20, never thousands
    assert 15 < series.rate < 25 and series.stalls == []
