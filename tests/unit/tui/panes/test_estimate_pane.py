"""The Estimate pane draws EstimateRows."""

from kvtop.runner.calibration.forecast import Forecast
from kvtop.runner.physics.estimate_rows import EstimateContext, EstimateRows, Row, TurnFigures
from kvtop.runner.physics.verdicts import estimate_verdict
from kvtop.runner.units import MIB
from kvtop.tui.panes.estimate import EstimatePane

ROWS = EstimateRows(ttft=Row(0.043, 0.098), prefill=Row(925.0, 420.0), decode=Row(307.0, 150.0),
                    kv=Row(90 * MIB, 90 * MIB), weights=Row(92.1 * MIB, 92.1 * MIB), peak=Row(280 * MIB, 251 * MIB),
                    context=EstimateContext(weights_bytes=92 * MIB), turn=TurnFigures(prefill_tokens=37),
                    note="hardware: test profile")
def drawn(pane) -> str:
    return pane.render().plain


def test_the_pane_draws_the_rows_and_the_verdict():
    pane = EstimatePane()
    pane.set_rows(ROWS)
    text = drawn(pane)
    lines = text.split("\n")
    assert lines[0].split() == ["roofline", "forecast", "measured", "ratio"]
    assert lines[1].split() == ["TTFT", "43", "ms", "N/A", "98", "ms", "2.28x"]  # no forecast: ÷ the roofline
    assert lines[2].split() == ["pp", "tok/s", "925", "N/A", "420", "0.45x"]
    assert lines[4].split() == ["KV", "bytes", "90.0", "MiB", "90.0", "MiB", "1.00x"]
    assert lines[-2] == estimate_verdict(ROWS) and lines[-1] == "hardware: test profile"


def test_before_any_turn_the_speed_rows_are_na():
    pane = EstimatePane()
    pane.set_rows(EstimateRows(kv=Row(90 * MIB, None)))
    lines = drawn(pane).split("\n")
    assert lines[1].split() == ["TTFT", "N/A", "N/A", "N/A", "N/A"] and lines[4].split()[-2:] == ["N/A", "N/A"]
    assert lines[-1] == "send a message to compare the estimate with a measured turn"


def test_a_forecast_is_its_own_column_and_the_ratio_is_measured_over_it():
    pane = EstimatePane()
    pane.set_rows(ROWS)
    pane.set_forecast(Forecast(prompt_tokens=37, cached_tokens=0, reply_tokens=64, ttft_s=0.090, prefill_s=0.088,
                               prefill_tok_s=400.0, decode_tok_s=160.0, reply_s=0.5, basis="calibrated", n_turns=3))
    lines = drawn(pane).split("\n")
    assert lines[1].split() == ["TTFT", "43", "ms", "90", "ms", "98", "ms", "1.09x"]
    assert lines[2].split() == ["pp", "tok/s", "925", "400", "420", "1.05x"]
    assert lines[3].split() == ["tg", "tok/s", "307", "160", "150", "0.94x"]
    assert lines[4].split() == ["KV", "bytes", "90.0", "MiB", "90.0", "MiB", "1.00x"]  # no forecast: exact
    assert "forecast: calibrated on 3 turns" in lines


async def test_a_narrow_pane_drops_the_forecast_column_first_and_never_wraps_a_row():
    from textual.app import App

    class One(App):
        def compose(self):
            yield EstimatePane(id="e")

    for width, columns in ((60, ["roofline", "forecast", "measured", "ratio"]), (40, ["roofline", "forecast", "measured", "ratio"]),
                           (39, ["roofline", "measured", "vs", "roof"]), (30, ["measured", "vs", "roof"])):
        app = One()
        async with app.run_test(size=(width, 20)) as pilot:
            pane = app.query_one(EstimatePane)
            pane.styles.width = width
            pane.set_rows(ROWS)
            await pilot.pause()
            lines = drawn(pane).split("\n")
            assert lines[0].split() == columns
            assert all(len(line) <= pane.size.width for line in lines[:7]), (width, lines[:7])


def test_a_ratio_of_100x_and_more_stays_apart_from_the_measured_value():
    """A new user saw "4.27 s127.35x": a seven-character ratio filled its column."""
    import dataclasses

    pane = EstimatePane()
    pane.set_rows(dataclasses.replace(ROWS, ttft=Row(0.0335, 4.27)))
    ttft = drawn(pane).split("\n")[1]
    assert ttft.split()[-3:] == ["4.27", "s", "127.46x"], ttft


def test_the_verdict_line_says_whether_the_turn_landed_inside_the_forecasts_interval():
    """Issue 35: "TTFT 2.9 s, outside the forecast 1.1–1.6 s"; the interval and the turns it rests on below."""
    pane = EstimatePane()
    pane.set_rows(ROWS)  # measured: TTFT 98 ms, decode 150 tok/s
    pane.set_forecast(Forecast(prompt_tokens=37, cached_tokens=0, reply_tokens=64, ttft_s=0.060, prefill_s=0.058,
                               prefill_tok_s=600.0, decode_tok_s=160.0, reply_s=0.5, basis="calibrated", n_turns=5,
                               ttft_s_low=0.050, ttft_s_high=0.070, decode_tok_s_low=140.0, decode_tok_s_high=180.0,
                               interval_n=4))
    lines = drawn(pane).split("\n")
    assert "TTFT 98 ms, outside the forecast 50 ms–70 ms; decode 150 tok/s, inside 140 tok/s–180 tok/s" in lines
    assert "forecast: calibrated on 5 turns; TTFT 80%: 50 ms–70 ms (4 turns at this load)" in lines


async def test_at_80x24_the_verdict_quotes_a_column_and_a_ratio_the_pane_shows():
    """At 80x24 the pane dropped its roofline column, its ratios were of the forecast, and
    its verdict said "TTFT at 2.28x the roofline": a figure from a column not on screen."""
    import re

    from textual.app import App

    class One(App):
        def compose(self):
            yield EstimatePane(id="e")

    app = One()
    async with app.run_test(size=(40, 30)) as pilot:  # the Estimate pane's content width at 80x24
        pane = app.query_one(EstimatePane)
        pane.set_rows(ROWS)
        pane.set_forecast(Forecast(prompt_tokens=37, cached_tokens=0, reply_tokens=64, ttft_s=0.090, prefill_s=0.088,
                                   prefill_tok_s=400.0, decode_tok_s=160.0, reply_s=0.5, basis="calibrated", n_turns=3))
        await pilot.pause()
        text = drawn(pane)
        lines = text.split("\n")
        quoted = re.search(r"TTFT at ([\d.]+x) the roofline", " ".join(lines[7:]))
        assert quoted, text
        assert lines[0].split() == ["roofline", "forecast", "measured", "ratio"], text  # short labels make room
        roof, measured = lines[1].split()[1:3], lines[1].split()[5:7]
        assert (roof, measured) == (["43", "ms"], ["98", "ms"]) and quoted.group(1) == "2.28x", text  # 98 / 43
        assert lines[1].split()[-1] == "1.09x", text  # the ratio column: over the forecast, as at 160 columns


async def test_at_80x24_the_forecast_column_shows_and_ratios_are_over_it():
    """At 80x24 the forecast column was left out, every ratio was over the roofline and
    headed only "ratio", under it "TTFT 98 ms, inside the forecast 50 ms–120 ms": a user
    read the 2.28x as the forecast's miss. Then it was headed "vs roof", and forecast vs
    actual, the pane's point, was not on screen (new-user trial): short labels make room."""
    from textual.app import App

    class One(App):
        def compose(self):
            yield EstimatePane(id="e")

    app = One()
    async with app.run_test(size=(40, 30)) as pilot:  # the Estimate pane's content width at 80x24
        pane = app.query_one(EstimatePane)
        pane.set_rows(ROWS)
        pane.set_forecast(Forecast(prompt_tokens=37, cached_tokens=0, reply_tokens=64, ttft_s=0.080, prefill_s=0.078,
                                   prefill_tok_s=450.0, decode_tok_s=160.0, reply_s=0.5, basis="calibrated", n_turns=5,
                                   ttft_s_low=0.050, ttft_s_high=0.120, decode_tok_s_low=140.0, decode_tok_s_high=180.0,
                                   interval_n=4))
        await pilot.pause()
        lines = drawn(pane).split("\n")
        assert lines[0].split() == ["roofline", "forecast", "measured", "ratio"], lines[0]
        assert lines[1].split() == ["TTFT", "43", "ms", "80", "ms", "98", "ms", "1.23x"]  # 98 ms over the forecast's 80
        assert [line.split()[0] for line in lines[2:7]] == ["pp/s", "tg/s", "KV", "wts", "peak"]
        assert all(len(line) <= pane.size.width for line in lines[:7]), lines[:7]
        assert "inside the forecast 50 ms–120 ms" in " ".join(lines[7:])
