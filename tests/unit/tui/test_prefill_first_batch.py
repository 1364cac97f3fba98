"""Before llama.cpp's first micro-batch reports, the Prefill pane counts down the turn's
forecast and names the micro-batch in flight; once one reports, the measured figures
(new-user trial: "0/580 tok … ETA - computing" for a whole first micro-batch of 512)."""

import threading

from helpers import make_app, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.runner.units import fmt_seconds
from kvtop.tui.panes.prefill import PrefillPane


def _text(pane: PrefillPane) -> str:
    return " ".join(pane.render().plain.split())


async def test_first_micro_batch_shows_the_forecast_then_the_measured_eta(tmp_path, smollm_shaped):
    started, first = threading.Event(), threading.Event()
    holds = [(lambda e: isinstance(e, ev.TurnStarted), started),
             (lambda e: isinstance(e, ev.PrefillProgress), first)]
    turn = scripted_turn(1, 1000.0, 580, 0, ["Hi", "."], pp_tok_s=100.0)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    app = make_app(settings, lambda s: ScriptedEngine(s, smollm_loaded(smollm_shaped), [turn], hold=holds), tmp_path,
                   live_system=False, write_transcript=False, record_trace=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.query_one("#prompt").value = "hello"
        await pilot.press("enter")
        pane = app.query_one(PrefillPane)
        await wait_until(pilot, lambda: pane.note == "computing" and pane.forecast_s is not None, what="prefill start")
        fc = app.estimates.turn_forecast
        assert fc is not None and pane.forecast_s == fc.prefill_s and fc.prefill_s > 0.2
        t0, e0 = pane._since
        half = fc.prefill_s / 2
        pane.tick(t0 + half)  # halfway through the forecast's first micro-batch: it counts down
        text = _text(pane)
        assert "computing tokens 1–512 of 580" in text, text
        assert abs(pane.elapsed - (e0 + half)) < 1e-6 and f"ETA ≈ {fmt_seconds(fc.prefill_s - half)} (forecast)" in text, text
        pane.tick(t0 + fc.prefill_s + 1.0)  # past the forecast: said, never "0 ms" while it runs
        assert "ETA > forecast" in _text(pane), _text(pane)
        started.set()
        await wait_until(pilot, lambda: pane.done == 512, what="first micro-batch")
        text = _text(pane)
        assert "(forecast)" not in text and "forecast" not in text.split("ETA")[1], text
        assert "computing tokens 513–580 of 580" in text and "pp 100" in text, text
        first.set()
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn end")
        text = _text(pane)
        assert "580/580 tok" in text and "ETA -" in text and "computing" not in text, text
