"""The dashboard's pages stay put (issue 33, item 4): at one terminal size the page count
and the pages never change between turns. At 160x48 (the size the README lays the
dashboard out at) it was one page before a turn and two after it: the Prefill pane's
TTFT lines and the Estimate pane's verdict pushed Estimate and Memory onto page 2, and
the next prefill brought them back. Now Prefill and Estimate have fixed rows and fold
what does not fit (tui/dashboard.py SLOTS).

The machine is busy here (other processes at 80% of the CPU, a CPU probe taken while
busy): on a quiet one the scripted turns' lines were short enough that the old plan,
measured from the panes' lines, kept 160x48 on one page, and this test passed on the
code it was written against. A busy machine's verdict, load and hardware notes are the
long lines a new user saw push Estimate and Memory onto a second page."""

import dataclasses
import os
import threading
import time

import pytest
from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.calibration.load import CPULoad
from kvtop.runner.settings import Settings

TITLES = ("Prefill", "KV cache", "Decode", "Estimate vs actual", "Memory")
SHOTS = os.environ.get("KVTOP_TEST_SHOTS")  # a folder: each size's screen at the end, to look at
PAGES = {(160, 48): 1, (140, 40): 2, (120, 40): 2, (100, 30): 4, (80, 24): 4}
BUSY_PROBE = ("CPU probe (2 threads, 2026-12-03 10:04, FLOPS of llama.cpp q5_K matmul, probed at 80% busy: at "
              "least 17.2 GB/s, 0.063 TFLOPS; taken again once quiet)")


def turns() -> list[list[object]]:
    """A short first turn (its TTFT waterfall lands in the Prefill pane), then a long one
    the test holds in its prefill and its decode: 1,200 tokens in micro-batches of 256
    timed 0.4 s apart, a reply of 8 tokens timed 0.2 s apart (the events' times: the turn
    is not paced); its prefix diverged (one more line in the Prefill pane)."""
    first = scripted_turn(1, 1000.0, 30, 0, ["Hello", " there", "."], timeline=True)
    second = scripted_turn(2, 2000.0, 1200, 30, [" word"] * 8, pp_tok_s=640.0, tg_tok_s=5.0, ubatch=256,
                           timeline=True)
    second[0] = dataclasses.replace(second[0], first_diff_index=12)
    return [first, second]


def pages(app) -> tuple[str, ...]:
    pager = app.dash.pager
    return tuple(pager.labels) if pager.display else ("one page",)


def every_title_shown(app) -> bool:
    text = screen_text(app)
    return all(f"─ {t} ─" in text for t in TITLES)


@pytest.mark.parametrize("size", list(PAGES))
async def test_the_pages_never_change_through_load_turns_new_chat_and_undo(tmp_path, smollm_shaped, size):
    gate = threading.Event()
    # turn 2 held in its prefill, then after its first token, while the test looks (it was
    # paced in real time, 3.6 s a size). The app's clock skips 2 s as the prefill is let go:
    # the first token then comes an update interval after the turn began, as paced it did,
    # so the Decode pane shows the turn decoding
    in_prefill, in_decode = threading.Event(), threading.Event()
    holds = [(lambda e: isinstance(e, ev.PrefillProgress) and e.turn_id == 2, in_prefill),
             (lambda e: isinstance(e, ev.TokenEvent) and e.turn_id == 2 and e.index >= 1, in_decode)]
    skipped = [0.0]
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(smollm_shaped)
    engine = {}

    def factory(s):
        engine["e"] = ScriptedEngine(s, loaded, turns(), load_gate=gate, hold=holds)
        return engine["e"]

    from helpers import FIXED_HW

    app = make_app(settings, factory, root=tmp_path, live_system=False, write_transcript=False,
                   hardware=dataclasses.replace(FIXED_HW, source=BUSY_PROBE),
                   clock=lambda: time.monotonic() + skipped[0])
    app.cpu_watch.load_now = lambda: CPULoad.of_share(0.8, 2)  # other processes hold 1.6 of 2 cores
    app.cpu_watch.turn_others_share = lambda: 0.8
    seen: dict[str, tuple[str, ...]] = {}

    async def record(step: str) -> None:
        await pilot.pause(0.1)
        seen[step] = pages(app)
        assert app.query_one("#metrics").max_scroll_y == 0, (size, step)  # nothing cut on the page shown
        if size == (160, 48):
            assert every_title_shown(app), (step, screen_text(app))
            assert "…" not in app.dash.estimate.render().plain, (step, app.dash.estimate.render().plain)  # it all fits

    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.2)
        await record("loading")
        gate.set()
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await record("loaded")

        await send(pilot, "hi")
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn 1")
        await record("after turn 1")
        assert "TTFT" in app.dash.prefill.render().plain  # its waterfall is on screen

        await send(pilot, "tell me more " * 20)
        prefill = app.dash.prefill
        await wait_until(pilot, lambda: app.turn_running and prefill.reused < prefill.done < prefill.total,
                         what="turn 2's prefill")
        await record("prefill")
        skipped[0] += 2.0
        in_prefill.set()
        await wait_until(pilot, lambda: app.turn_running and prefill.done >= prefill.total
                         and app.dash.decode.state == "decoding", what="turn 2's decode")
        await record("decode")
        in_decode.set()
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, what="turn 2")
        await record("after turn 2")
        assert "diverged" in prefill.render().plain or "…" in prefill.render().plain

        # F7's two measurements (their whole lines take three rows each in a narrow KV pane):
        # at 160x48 they moved Estimate and Memory to a second page
        whole = ["q8_0/q8_0: \u221247% KV (47.8 MiB at 4,096), KLD 0.0056 (99%: 0.043), same top token 97.4% "
                 "over this chat's 78 tokens",
                 "q4_0/q4_0: \u221272% KV (25.3 MiB at 4,096), KLD 0.0928 (99%: 0.689), same top token 81.0% "
                 "over this chat's 78 tokens"]
        app.dash.kv.set_quality(whole, ["q8_0 0.0056 (\u221247%)", "q4_0 0.0928 (\u221272%)"])
        await record("kv quality")
        if size == (160, 48):
            assert "KLD q8_0 0.0056 (\u221247%) · q4_0 0.0928 (\u221272%)" in screen_text(app)

        await pilot.press("ctrl+l")
        await record("new chat")
        await pilot.press("ctrl+z")
        await record("undo")
        if SHOTS:
            app.save_screenshot(f"layout-{size[0]}x{size[1]}.svg", SHOTS)

    assert len(set(seen.values())) == 1, (size, seen)
    first = next(iter(seen.values()))
    assert len(first) == PAGES[size] or (PAGES[size] == 1 and first == ("one page",)), (size, first)


def test_the_ttft_waterfall_is_one_line_and_counts_what_it_leaves_out():
    from kvtop.tui.panes.prefill import compact_waterfall

    timeline = (("wait for engine", 0.0, 0.05), ("template", 0.05, 0.03), ("ubatch 1", 0.08, 0.8),
                ("first decode+sample", 0.88, 0.02))
    wide = compact_waterfall(0.9, timeline, 120)
    assert len(wide) == 1 and "in F2" not in wide[0].plain and "template 3%" in wide[0].plain
    narrow = compact_waterfall(0.9, timeline, 44)
    assert len(narrow) == 1 and narrow[0].cell_length <= 44
    # the biggest segment stays, shortened ("prefill" without its micro-batches) to leave room for the count
    assert narrow[0].plain.startswith("TTFT 900 ms: ■ prefill 89%") and narrow[0].plain.endswith(" in F2")


def test_a_folded_pane_ends_in_an_ellipsis_within_its_rows():
    from textual.content import Content

    from kvtop.tui.panes.base import fold

    lines = [Content("a table row"), Content("a verdict " * 12), Content("hardware: test profile")]
    out = fold(lines, 30, 3)
    assert len(out) == 3 and out[-1].plain.endswith("…") and all(o.cell_length <= 30 for o in out)
    fits = fold(lines, 30, 10)  # it fits: every line kept, broken between phrases (tui/base/flow.py)
    assert [o.plain for o in fits] == ["a table row", "a verdict a verdict a verdict", "a verdict a verdict a verdict",
                                       "a verdict a verdict a verdict", "a verdict a verdict a verdict",
                                       "hardware: test profile"], fits
