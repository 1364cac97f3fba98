"""The decode chart on a speculative turn (issue 36, new-user trial): a verify pass hands
over k tokens at one time. The series measures its rate over passes, so every token of
a burst is a point at the pass's rate (the turn's whole history is drawn, the burst as a
step k positions wide), the ▲ mark is at the pass's first position, and the y axis comes
from what is drawn: counted per token, a window of 8 tokens inside a burst spanned
microseconds, the axis went to 1,000 and the 338 tok/s ceiling lay on its 0 row."""

import dataclasses
import re

from helpers import make_app, screen_text, send, wait_until
from rich.color import Color
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.tui.base.decode_series import DecodeSeries
from kvtop.tui.panes.decode import DecodePane

# Recorded: kvtop --spec-type ngram-simple on the demo model, a "Repeat this text exactly"
# prompt at 80x24, a busy 2-core machine (before the engine stamped a pass's tokens with
# one time). (KV position of the first token, then each token's gap from the one before
# it in ms); passes of 12, 4, 6, 24 and 19 tokens, each after a long wait (the pass).
RECORDED = (186, [
    57.33, 38.18, 28.36, 37.10, 32.46, 48.74, 32.60, 26.90, 33.16, 49.69, 51.51, 39.69, 39.84, 49.55,
    667.61, 1.42, 0.02, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01,  # 200: 12 tokens
    45.67, 28.31, 40.88, 26.54, 27.23, 38.74, 35.76, 34.44, 54.67, 43.15, 47.48, 38.18, 42.43, 43.77, 34.32,
    1134.70, 8.77, 0.04, 0.01,  # 227: 4
    24.55, 30.16, 22.17, 23.65, 47.10, 46.25, 44.97, 33.76, 46.53, 34.97, 40.14, 32.70,
    927.96, 6.45, 0.04, 0.01, 0.01, 0.01,  # 243: 6
    903.85, 1.41, 0.03] + [0.01] * 21 + [  # 249: 24
    431.37, 0.19] + [0.01] * 17)  # 273: 19


def recorded_series() -> DecodeSeries:
    series, (pos, gaps), t = DecodeSeries(), RECORDED, 100.0
    for gap in gaps:
        t += gap / 1000
        series.add(pos, t)
        pos += 1
    return series


def test_a_recorded_speculative_turn_has_a_point_at_every_position_and_no_false_stall():
    series = recorded_series()
    positions = [p for p, _ in series.points]
    assert positions == list(range(189, 292)), positions[-30:]  # from the third gap on, bursts included
    rates = dict(series.points)
    assert max(rates.values()) < 60, max(rates.values())  # the turn ran at 15-30 tok/s: never 767
    assert series.stalls == []  # each long wait was a verify pass computing
    assert series.passes == [(200, 12), (227, 4), (243, 6), (249, 24), (273, 19)]
    for first, n in series.passes:  # a pass's tokens came at once: one rate, a step n wide
        assert len({rates[p] for p in range(first, first + n)}) == 1


def test_a_wait_as_long_as_a_verify_pass_that_gave_one_token_is_no_stall():
    series, t, pos = DecodeSeries(), 0.0, 100
    for n, wait in [(1, 0.04)] * 10 + [(12, 0.9), (1, 0.04), (1, 0.04), (1, 0.85), (1, 0.04), (1, 0.04)]:
        t += wait
        for _ in range(n):
            series.add(pos, t)
            pos += 1
    assert series.stalls == [] and series.passes == [(110, 12)]
    series.add(pos, t + 5.0)  # far longer than any pass: a pause
    assert [p for p, _ in series.stalls] == [pos]


def speculative(events, slow: float = 1.0):
    """The turn's tokens as a speculating engine hands them over at 100 tok/s plain: 30
    plain steps, a verify pass of 47 tokens that computed for 0.15 s, 20 plain steps,
    five passes of 6 tokens (0.03 s each), then plain steps. A pass's tokens are spread as
    the recorded turn's were (an older kvtop's trace, replayed): the second 1.4 ms after the
    first, the rest 20 µs apart. ``slow``: every wait that many times longer."""
    sizes = [1] * 30 + [47] + [1] * 20 + [6] * 5 + [1] * 40
    waits = {47: 0.15, 6: 0.03, 1: 0.01}
    times, t = [], 1000.1
    for n in sizes:
        t += waits[n] * slow
        times += [t] + [t + 1.4e-3 + j * 20e-6 for j in range(n - 1)]
        t = times[-1]
    toks = [e for e in events if isinstance(e, ev.TokenEvent)]
    assert len(toks) <= len(times)
    out = []
    for e in events:
        if isinstance(e, ev.TokenEvent):
            e = dataclasses.replace(e, t=times[e.index])
        elif isinstance(e, ev.TurnDone):  # with its speculation figures: the summary's lines they add
            m = dataclasses.replace(e.metrics, spec_type="ngram-simple", spec_drafted=6 * 48, spec_accepted=46 + 5 * 5,
                                    spec_passes=6, spec_plain_steps=90, spec_tokens=len(toks),
                                    spec_s=times[len(toks) - 1] - times[0], spec_draft_s=0.01, spec_verify_s=0.3,
                                    spec_accepted_per_pos=(6,) * 5 + (1,) * 41, spec_plain_step_s=0.01)
            e = dataclasses.replace(e, t=times[len(toks) - 1] + 0.001, metrics=m)
        out.append(e)
    return out


async def chart_of(tmp_path, model, size, slow: float = 1.0):
    turn = speculative(scripted_turn(1, 1000.0, 40, 0, [" w"] * 150, tg_tok_s=100.0), slow)
    settings = Settings(model, n_ctx=4096, n_threads=2, spec_type="ngram-simple")
    app = make_app(settings, lambda s: ScriptedEngine(s, smollm_loaded(model), [turn]), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.facts is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        if size[0] < 100:
            await pilot.press("f6")  # at 80x24 the Decode pane is the second page
        await wait_until(pilot, lambda: app.query_one("#decode-chart").size.width > 0, what="decode page")
        await pilot.pause(0.3)
        ceiling = Color.parse(app.theme_variables["kvtop-ceiling"]).get_truecolor()
        positions = [p for p, _ in app.query_one(DecodePane).series]
        return app.query_one("#decode-chart").render(), (ceiling, positions), re.sub(r"\s+", "", screen_text(app))


def drawn_in(text, rgb) -> tuple[set[tuple[int, int]], int]:
    """(the plot's cells (row from the top, column) that hold a braille dot in colour ``rgb``;
    the plot's rows)."""
    lines = text.split("\n")
    top = next(i for i, line in enumerate(lines) if "┌" in line.plain)
    bottom = next(i for i, line in enumerate(lines) if "└" in line.plain)
    cells = set()
    for i, line in enumerate(lines[top + 1:bottom]):
        for span in line.spans:
            color = getattr(span.style, "color", None)
            if color is not None and color.get_truecolor() == rgb:
                cells |= {(i, c) for c in range(span.start, span.end) if "\u2801" <= line.plain[c] <= "\u28ff"}
    return cells, bottom - top - 1


async def check_chart(tmp_path, model, size):
    chart, (ceiling, positions), screen = await chart_of(tmp_path, model, size)
    lines = chart.plain.splitlines()
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    xs = [int(x.replace(",", "")) for x in lines[bottom + 1].split()]
    assert xs[0] <= 80 and xs[-1] >= 140, xs  # the burst (positions 70-116) and the turn around it
    ys = [int(row.split("┤")[0].replace(",", "")) for row in lines if "┤" in row and row.split("┤")[0].strip()]
    assert max(ys) < 600, ys  # 100 tok/s plain, about 250 over the burst: not 1,000
    cells, n_rows = drawn_in(chart, ceiling)
    assert cells and max(r for r, _ in cells) < n_rows - 1, lines  # the ~308 tok/s ceiling is not on the 0 row
    assert positions == list(range(43, 190)), positions  # a point at every token's position, the burst's too
    assert "▲" in chart.plain and re.search(r"▲6verifypassesgave6–47tokeach", screen), screen


async def test_a_speculative_turn_s_chart_covers_its_burst_at_80x24(tmp_path, smollm_shaped):
    await check_chart(tmp_path, smollm_shaped, (80, 24))


async def test_a_speculative_turn_s_chart_covers_its_burst_at_160x48(tmp_path, smollm_shaped):
    await check_chart(tmp_path, smollm_shaped, (160, 48))


async def test_a_slow_speculative_turn_s_legend_keeps_the_ceiling_note_and_its_passes(tmp_path, smollm_shaped):
    """20 tok/s under a ~300 tok/s ceiling: the ceiling is above the chart. The speculation
    lines left the legend one line at 160x48 and at 80x24, and the verify passes' phrase
    was cut: the legend takes its short forms, and at 80x24 leaves out what the chart or
    the summary says already (the line's key, the ceiling the summary states)."""
    chart, _, screen = await chart_of(tmp_path, smollm_shaped, (160, 48), slow=5.0)
    # at 160x48 the legend's short forms keep it one line (they take fewer lines: polish3)
    assert "↑bandwidthceiling15x:abovethechart▲6passes:6–47tokeach│" in screen, screen
    chart, _, screen = await chart_of(tmp_path, smollm_shaped, (80, 24), slow=5.0)
    # at 80x24 the summary takes its short forms, so the chart and the legend keep their rows
    assert "│▲6verifypassesgave6–47tokeach│" in screen and "bandwidthceiling297tok/s" in screen, screen


def test_a_quick_plain_step_after_verify_passes_is_its_own_pass():
    """A busy machine: verify passes of 0.3 s are most gaps, so a 25 ms plain step is under a
    quarter of the median gap. Joined by that alone, the real engine's plain steps were
    taken into the passes before them (a pass of 5 read as 7); a pass the engine stamped
    (its tokens at one time) is what it is."""
    series, t, pos = DecodeSeries(), 0.0, 100
    for n, wait in [(1, 0.3)] * 3 + [(5, 0.3), (1, 0.025), (1, 0.3), (4, 0.3), (1, 0.025), (1, 0.025), (3, 0.3)]:
        t += wait
        for _ in range(n):
            series.add(pos, t)
            pos += 1
    assert series.passes == [(103, 5), (110, 4), (116, 3)], series.passes
