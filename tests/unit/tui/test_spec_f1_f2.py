"""Speculation's acceptance by draft position in F2 (the turn's waterfall) and F1 (the
help screen's Speculation row), on the real app with a scripted speculative turn."""

import dataclasses

from helpers import make_app, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.tui.base.screens import HelpScreen
from kvtop.tui.turn.waterfall import WaterfallScreen

SPEC = {"spec_type": "ngram-simple", "spec_drafted": 12, "spec_accepted": 6, "spec_passes": 4,
        "spec_plain_steps": 2, "spec_tokens": 12, "spec_s": 0.05, "spec_verify_s": 0.04,
        "spec_accepted_per_pos": (4, 2, 0), "spec_plain_step_s": 0.008}


def _app(tmp_path, smollm_shaped, spec=True):
    script = scripted_turn(1, 1000.0, 30, 0, ["Hi", " there", "."], timeline=True)
    if spec:
        done = script[-1]
        script[-1] = dataclasses.replace(done, metrics=dataclasses.replace(done.metrics, **SPEC))
    loaded = smollm_loaded(smollm_shaped)
    return make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                    lambda s: ScriptedEngine(s, loaded, [script]), root=tmp_path, live_system=False,
                    write_transcript=False)


async def _one_turn(pilot):
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None, what="load")
    app.query_one("#prompt").value = "hello"
    await pilot.press("enter")
    await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn")


def _help_text(app) -> str:
    return " ".join(str(w.render()) for w in app.screen.query(".help-what"))


async def test_f2_and_f1_show_the_acceptance_by_position(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped)
    async with app.run_test(size=(80, 24)) as pilot:
        await _one_turn(pilot)
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), timeout=5, what="waterfall")
        spec = str(app.screen.query_one("#waterfall-spec").render())
        assert "speculation:" in spec and "accepted by position: 1 100% · 2 50% · 3 0%" in spec
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, WaterfallScreen), timeout=5, what="closed")
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=5, what="help")
        text = _help_text(app)
        assert "accepted by position: 1 100% · 2 50% · 3 0%" in text and "last speculative turn:" in text
        assert "Speculation" in " ".join(str(w.render()) for w in app.screen.query(".help-key"))


async def test_without_speculation_neither_says_it(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped, spec=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await _one_turn(pilot)
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), timeout=5, what="waterfall")
        assert not app.screen.query("#waterfall-spec")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, WaterfallScreen), timeout=5, what="closed")
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=5, what="help")
        assert "accepted by position" not in _help_text(app)


def test_f1_names_an_attached_servers_last_passes():
    from types import SimpleNamespace

    from kvtop.runner.server.spec_metrics import SpecCounters, SpecRates
    from kvtop.tui.turn.spec_view import help_spec

    rates = SpecRates(1.0, SpecCounters(60, 44, 8, (8, 6)), 12.0, 8.0, 0.67, recent=(4, (4, 3)))
    app = SimpleNamespace(turns=[], server_snapshots={0: SimpleNamespace(spec=rates)})
    assert "llama-server accepted by position (last 4 passes): 1 100% · 2 75%" in help_spec(app)
    assert help_spec(SimpleNamespace(turns=[], server_snapshots={0: SimpleNamespace(spec=None)})) is None
