"""The decode pane says whether speculation paid (issue 36): a turn whose metrics carry
the engine's spec_* figures gets one more line under the ceilings, and one without
them none. The real app on the scripted engine; the pane's rendered text is read."""

import dataclasses

import pytest
from helpers import make_app, send, wait_until
from rich.cells import cell_len
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.tui.panes.decode import DecodeSummary

PAID = dict(spec_type="ngram-simple", spec_drafted=48, spec_accepted=36, spec_passes=15, spec_tokens=51,
            spec_s=0.6, spec_verify_s=0.5, spec_plain_step_s=0.02)
COST = dict(spec_type="ngram-simple", spec_drafted=12, spec_accepted=1, spec_passes=4, spec_tokens=25,
            spec_s=0.53, spec_verify_s=0.104, spec_plain_step_s=0.02)


def with_spec(events, **fields):
    return [dataclasses.replace(e, metrics=dataclasses.replace(e.metrics, **fields))
            if isinstance(e, ev.TurnDone) else e for e in events]


async def summary_after(tmp_path, model, turn, size=(120, 40)) -> str:
    settings = Settings(model, n_ctx=4096, n_threads=2)
    app = make_app(settings, lambda s: ScriptedEngine(s, smollm_loaded(model), [turn]), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.pause(0.2)
        return app.query_one(DecodeSummary).render().plain


async def test_a_speculative_turn_that_paid_says_its_speedup_and_its_roof_is_the_physics_at_its_acceptance(
        tmp_path, smollm_shaped):
    """(Two tests of the same turn before, each with its own App.)"""
    from helpers import FIXED_HW

    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here
    from kvtop.runner.physics.spec_roof import spec_roof
    from kvtop.runner.units import fmt_rate

    turn = with_spec(scripted_turn(1, 0.0, 20, 0, ["a"] * 30), **PAID)
    summary = await summary_after(tmp_path, smollm_shaped, turn)
    spec = " ".join(summary.splitlines()[3:])
    assert spec.startswith("speculation: 3.4 tok/pass, 75% of 48 drafted accepted, 1.7x plain decode ")
    # the speculative roof beside the plain ceilings: 3.2 drafts a pass, 75% of them kept
    assert "speculative roof" in spec and "x the plain ceiling, 3.4 tok/pass)" in spec

    text = " ".join(summary.splitlines())
    here = Here.at(load_facts(smollm_shaped), FIXED_HW, Settings(smollm_shaped, n_ctx=4096, n_threads=2).resolved())
    r = spec_roof(here, 48 / 15, 36 / 48, depth=49)  # 48 drafted in 15 passes; 50 cells used
    assert f"speculative roof {fmt_rate(r.roof_tok_s)} ({r.speedup:.1f}x the plain ceiling" in text
    # the turn's rate is a share of that roof, not of the one-token ceiling
    first = text.split(" bandwidth ceiling")[0]
    assert first.endswith("% of spec roof") and "turn avg" in first, first


# 2 passes of 48 drafted tokens, 4 kept: a batch of 49 is compute-bound on the fixed
# probe's CPU and costs many plain steps, so the roof at this acceptance is under the
# plain ceiling (a trial: "0.8x the plain ceiling" beside "41% of spec roof")
LOW = dict(spec_type="ngram-simple", spec_drafted=96, spec_accepted=4, spec_passes=2, spec_plain_steps=20,
           spec_tokens=26, spec_s=0.9, spec_verify_s=0.5, spec_plain_step_s=0.02)


async def test_a_roof_under_the_plain_ceiling_says_speculation_cannot_pay(tmp_path, smollm_shaped):
    from helpers import FIXED_HW

    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here
    from kvtop.runner.physics.spec_roof import spec_roof
    from kvtop.runner.units import fmt_rate

    turn = with_spec(scripted_turn(1, 0.0, 20, 0, ["a"] * 30), **LOW)
    text = " ".join((await summary_after(tmp_path, smollm_shaped, turn)).splitlines())
    here = Here.at(load_facts(smollm_shaped), FIXED_HW, Settings(smollm_shaped, n_ctx=4096, n_threads=2).resolved())
    r = spec_roof(here, 48, 4 / 96, depth=49)
    assert r.speedup < 1
    first = text.split(" bandwidth ceiling")[0]
    assert first.endswith("% of ceiling"), first  # the higher of the two: the plain one
    assert (f"roof {fmt_rate(r.roof_tok_s)} at {r.tokens_per_pass:.1f} tok/pass, under the plain ceiling "
            f"{fmt_rate(1 / r.plain_s)}: speculation cannot pay here") in text, text
    assert "(measured)" in text  # the turn's own verify cost (the modelled one is kvtop estimate's)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 48)])
async def test_the_speculation_line_breaks_between_phrases_within_the_pane(tmp_path, smollm_shaped, size):
    """A speculative turn that cost says by how much (its line at 120x40, the size that had
    a test of its own), and a trial found the long line clipped at the pane's edge at 80
    columns."""
    turn = with_spec(scripted_turn(1, 0.0, 20, 0, ["a"] * 30), **COST)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    app = make_app(settings, lambda s: ScriptedEngine(s, smollm_loaded(smollm_shaped), [turn]), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.pause(0.3)
        summary = app.query_one(DecodeSummary)
        for _ in range(len(app.dash.pager.labels)):  # at 80x24 the pane may be on another page (F6)
            if summary.content_region.width > 0:
                break
            await pilot.press("f6")
            await pilot.pause(0.2)
        width = summary.content_region.width
        lines = summary.render().plain.split("\n")
        assert width > 0 and all(cell_len(line) <= width for line in lines), (width, lines)
        assert summary.content_region.height == len(lines), (summary.content_region.height, lines)
        if size[0] < 100:  # 40 columns: the full lines would leave the chart 2 rows; F1 and F2 keep them
            assert lines[3:] == ["spec cost 6%: 1.2 tok/pass, 8% of 12", "spec roof 290 < plain 307 tok/s"], lines
            assert app.query_one("#decode-chart").content_region.height >= 7
            return
        assert " ".join(lines[3:]).startswith("speculation cost 6%: 8% of 12 drafted accepted, each verify pass "
                                              "of 4 tok costs 1.3x a plain step (measured)")
        for phrase in ("each verify pass of 4 tok", "costs 1.3x a plain step (measured)"):
            assert any(phrase in line for line in lines), (phrase, lines)


async def test_a_plain_turn_is_a_share_of_the_plain_ceiling_and_has_no_speculation_line(tmp_path, smollm_shaped):
    """(Two tests of the same turn before, each with its own App.)"""
    text = await summary_after(tmp_path, smollm_shaped, scripted_turn(1, 0.0, 20, 0, ["a"] * 30))
    assert text.splitlines()[0].endswith("% of ceiling")
    assert "speculation" not in text and len(text.splitlines()) == 3


async def test_a_new_chat_undone_brings_back_the_roof_line_too(tmp_path, smollm_shaped):
    # Ctrl+Z restored the speculation line but not the roof under it (its fields were not kept)
    turn = with_spec(scripted_turn(1, 0.0, 20, 0, ["a"] * 30), **LOW)
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    app = make_app(settings, lambda s: ScriptedEngine(s, smollm_loaded(smollm_shaped), [turn]), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.pause(0.2)
        before = app.query_one(DecodeSummary).render().plain
        assert "speculation cannot pay here" in before, before
        await pilot.press("ctrl+l")
        await pilot.pause(0.2)
        assert "speculation" not in app.query_one(DecodeSummary).render().plain
        await pilot.press("ctrl+z")
        await wait_until(pilot, lambda: app.query_one(DecodeSummary).render().plain == before, what="the lines back")
