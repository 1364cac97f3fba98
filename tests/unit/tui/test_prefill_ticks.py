"""The prefill pane's elapsed time and ETA move on kvtop's own pace while a prefill runs,
not only when a micro-batch reports (one can take many seconds on a long prompt)."""

import time

from helpers import make_app, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.tui.panes.prefill import PrefillPane

UBATCH_S = 3.0  # each 512-token micro-batch reports 3 s after the one before


def _slow_prefill_app(tmp_path, smollm_shaped):
    loaded = smollm_loaded(smollm_shaped)
    turn = scripted_turn(1, 1000.0, 1024, 0, ["Hi", "."], pp_tok_s=512 / UBATCH_S)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    return make_app(settings, lambda s: ScriptedEngine(s, loaded, [turn], speed=1.0, max_gap=UBATCH_S), tmp_path,
                    live_system=False, write_transcript=False, record_trace=False, refresh=0.25)


async def _sample(pilot, pane, wait_s: float):
    t_end = time.monotonic() + wait_s
    while time.monotonic() < t_end:
        await pilot.pause(0.05)
    return pane.elapsed, pane.eta()


async def test_elapsed_and_eta_tick_between_micro_batches(tmp_path, smollm_shaped):
    app = _slow_prefill_app(tmp_path, smollm_shaped)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.query_one("#prompt").value = "hello"
        await pilot.press("enter")
        pane = app.query_one(PrefillPane)
        await wait_until(pilot, lambda: pane.note == "computing", what="prefill start")
        # before the first micro-batch reports: no rate yet, but the clock runs
        e1, eta1 = await _sample(pilot, pane, 0.6)
        e2, _ = await _sample(pilot, pane, 0.8)
        assert pane.done == 0, "the first micro-batch reported too early for this check"
        assert eta1 is None and e2 - e1 > 0.4, (e1, e2)
        # after it: the ETA counts down at the rate measured so far, elapsed goes on
        await wait_until(pilot, lambda: pane.done == 512, timeout=10, what="first micro-batch")
        e3, eta3 = await _sample(pilot, pane, 0.3)
        e4, eta4 = await _sample(pilot, pane, 0.8)
        assert pane.done == 512, "the second micro-batch reported too early for this check"
        assert e4 - e3 > 0.4 and eta3 is not None and eta3 - eta4 > 0.4, (e3, e4, eta3, eta4)
        assert abs((e4 + eta4) - 2 * UBATCH_S) < 1.0  # elapsed + ETA: the whole prefill at that rate
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn end")
        done_elapsed = pane.elapsed
        await pilot.pause(0.6)
        assert pane.elapsed == done_elapsed  # a finished prefill stays put
