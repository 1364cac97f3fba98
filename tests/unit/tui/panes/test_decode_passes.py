"""The decode chart marks verify passes (issue 36): a speculating engine's pass hands over
its tokens microseconds apart; each pass that made more than one token is a ▲ on the
chart's bottom row (one a column), the legend counts them, and an engine that does not
speculate (whose bunched tokens are no pass) gets none. At 80x24."""

import dataclasses
import re

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.tui.base.decode_series import DecodeSeries
from kvtop.tui.panes.decode_chart import PASS_MARK, legend, plan_chart


def test_a_burst_of_tokens_is_one_pass_and_a_lone_token_none():
    series, t, pos = DecodeSeries(), 0.0, 100
    for n in (12, 1, 3, 1):  # passes of 12 and 3 tokens, two plain steps
        t += 0.05
        for k in range(n):
            series.add(pos, t + k * 20e-6)
            pos += 1
    assert series.passes == [(100, 12), (113, 3)]


def test_a_long_pass_is_no_stall_and_its_tokens_are_points():
    """13 tokens at 6.7 tok/s, then a verify pass that computed for 2 s and made 27
    tokens: a real turn's chart took the wait for a stall and drew none of the 27."""
    series, t, pos = DecodeSeries(), 0.0, 77
    for _ in range(13):
        t += 0.15
        series.add(pos, t)
        pos += 1
    t += 2.0
    for k in range(27):
        series.add(pos, t + k * 20e-6)
        pos += 1
    assert series.stalls == [] and series.passes == [(90, 27)]
    assert series.points[-1][0] == 116 and 10 < series.rate < 20  # 27 tokens in about 2 s
    series.add(pos, t + 3.5)  # a real pause after it (no burst follows) stays a stall
    series.add(pos + 1, t + 3.65)
    assert [p for p, _ in series.stalls] == [117]


def test_one_mark_a_column_and_the_legend_counts_every_pass():
    series = [(p, 100.0) for p in range(100, 300)]
    passes = [(p, 3) for p in range(100, 300, 2)] + [(151, 9)]  # a pass every 2 tokens: 101 of them
    plan = plan_chart(series, [], lambda d: 150.0, 40, passes)  # a chart of 20 columns
    assert len(plan.passes) <= 20 and (151, 9) in plan.passes  # the column's biggest pass is its mark
    assert plan.pass_count == 101 and "▲ 101 verify passes gave 3–9 tok each" in legend(plan).plain
    assert plan_chart(series, [], lambda d: 150.0, 40).passes == []


def bursts(events, size: int):
    """The turn's tokens handed over ``size`` at a time, 20 µs apart (a verify pass's)."""
    out = []
    for e in events:
        if isinstance(e, ev.TokenEvent):
            lead = e.index - e.index % size
            e = dataclasses.replace(e, t=e.t - (e.index - lead) * 0.0066 + (e.index - lead) * 20e-6)
        out.append(e)
    return out


async def chart_of(tmp_path, model, turn, **spec) -> tuple[str, str]:
    settings = Settings(model, n_ctx=4096, n_threads=2, **spec)
    app = make_app(settings, lambda s: ScriptedEngine(s, smollm_loaded(model), [turn]), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.facts is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.press("f6")  # at 80x24 the Decode pane is the second page
        await wait_until(pilot, lambda: app.query_one("#decode-chart").size.width > 0, what="decode page")
        await pilot.pause(0.3)
        return app.query_one("#decode-chart").render().plain, re.sub(r"\s+", "", screen_text(app))


async def test_a_speculating_engines_passes_are_marked_at_80x24(tmp_path, smollm_shaped):
    turn = bursts(scripted_turn(1, 1000.0, 40, 0, [" w"] * 60, tg_tok_s=150.0), 4)
    chart, screen = await chart_of(tmp_path, smollm_shaped, turn, spec_type="ngram-simple")
    assert PASS_MARK in chart
    assert re.search(r"▲\d+verifypassesgave4tokeach", screen), screen
    chart, screen = await chart_of(tmp_path, smollm_shaped, turn)  # the same bunching, no speculation
    assert PASS_MARK not in chart and "verifypass" not in screen
