"""What a fresh-clone new-user trial found on screen and the first polish branch left
(docs/closing note "Trial findings left"): each a test that reads the panes, and fails
on the code before its fix."""

import re

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded
from textual.app import App

from kvtop.runner import events as ev
from kvtop.runner.settings import Settings
from kvtop.runner.system.hardware import SystemMemory
from kvtop.runner.system.memory import MemorySample
from kvtop.tui.panes.decode_chart import legend, plan_chart
from kvtop.tui.panes.prefill import PrefillPane


def test_the_ceiling_s_times_the_measured_rate_reads_the_same_at_every_width():
    """The legend's "Nx the measured rate" divided by the last bucket's mean rate, and the
    buckets follow the chart's width: the same turn read one figure at 80 columns and
    another at 160."""
    series = [(100 + i, 60.0 - i / 2) for i in range(101)]  # 60 tok/s falling to 10
    # two points a column: the decode chart's widths at 80, 120 and 160 columns, and a narrow one
    said = {legend(plan_chart(series, [], lambda depth: 400.0, buckets)).plain for buckets in (20, 76, 150, 190)}
    assert said == {"━ measured  ↑ bandwidth ceiling  40x the measured rate: above the chart"}, said


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class PrefillApp(App):
    def __init__(self, clock) -> None:
        super().__init__()
        self.clock = clock

    def compose(self):
        yield PrefillPane(clock=self.clock)


def eta_shown(pane) -> str:
    return re.search(r"ETA (\S+ ?\S*)", pane.render().plain).group(1)


async def test_the_eta_never_reads_0_while_f7_s_last_slice_runs():
    """F7 after a turn: the measurement's slices report like a prefill's, and its last
    slice ran 12 s after the countdown reached 0: the ETA read "0 ms" all that time (the
    floor for the batch in flight was the last turn's 512-token micro-batch)."""
    clock = Clock()
    async with PrefillApp(clock).run_test(size=(80, 12)) as pilot:
        pane = pilot.app.query_one(PrefillPane)
        clock.now = 95.0
        pane.begin(ev.TurnStarted(1, 512, 0, 4096, "gguf", None, 0.002, 0.0005, None, 1.0))
        pane.progress(ev.PrefillProgress(1, 512, 512, 0, 1.0, 512.0, 512, 1.0, 2.0))
        pane.measuring("measuring q8_0/q8_0 against f16/f16 (Esc stops)")
        clock.now = 97.0  # before its first report its clock runs: it read "elapsed N/A" for 20 s
        pane.tick(clock.now)
        assert "elapsed 2.00 s  ETA -" in pane.render().plain, pane.render().plain
        clock.now = 100.0
        pane.measured_so_far(256, 400, 5.0)  # 51 tok/s: 144 tokens, about 2.8 s, to go
        first = pane.eta()
        assert first is not None and 2.5 < first < 3.0, first
        for waited in (1.0, 2.0, 3.0, 6.0, 12.0):
            clock.now = 100.0 + waited
            pane.tick(clock.now)
            await pilot.pause()
            left = pane.eta()
            assert left is not None and left > 0.5, (waited, left)
            assert not eta_shown(pane).startswith("0 "), (waited, pane.render().plain)
        assert "pp " not in pane.render().plain  # no prefill rate: the chat through three caches
        pane.measured_so_far(400, 400, 17.0)
        pane.measurement_over(None)
        assert "reused 0  rate 23.5 tok/s" in pane.render().plain, pane.render().plain
        assert pane.eta() is None and eta_shown(pane).startswith("- ")


def test_kvtop_kld_s_progress_never_says_eta_0_before_the_end(capsys):
    """The last chunk's line read "ETA 0 s", then the decode speed took 12 s more."""
    from kvtop.runner.commands.kld import _progress

    for done in (1, 16, 17):
        _progress(done, 17, 5.6 * done, decode_tokens=32)
    _progress(99, 100, 99 * 0.3)  # 0.3 s to go: rounded up, never "0 s"
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "kvtop kld: chunk 1/17, 5.6 s, ETA 90 s, then the decode speed", lines
    assert lines[1] == "kvtop kld: chunk 16/17, 89.6 s, ETA 6 s, then the decode speed", lines
    assert lines[2] == ("kvtop kld: chunk 17/17, 95.2 s: every chunk scored; measuring the decode speed "
                        "(32 tokens a side)"), lines
    assert lines[3] == "kvtop kld: chunk 99/100, 29.7 s, ETA 1 s", lines


async def test_f2_s_running_sum_says_it_leaves_out_the_ubatch_running(tmp_path, smollm_shaped):
    """Mid-prefill, F2's "sum of segments … so far" was the reported micro-batches only:
    the one being computed was in no row and the sum did not say so."""
    loaded = smollm_loaded(smollm_shaped)
    turn = scripted_turn(1, 1000.0, 1024, 0, ["Hi", "."], pp_tok_s=512 / 2.0)  # a micro-batch every 2 s
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                   lambda s: ScriptedEngine(s, loaded, [turn], speed=1.0, max_gap=2.0), tmp_path,
                   live_system=False, write_transcript=False, record_trace=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "hello")
        await wait_until(pilot, lambda: app.dash.prefill.done == 512, what="first micro-batch")
        await pilot.press("f2")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "in progress: prefill 512/1,024 tok" in text, text
        sums = [line for line in text.split("\n") if "sum of segments" in line]
        assert len(sums) == 1 and "so far" in sums[0], text
        assert "so far, excluding the ubatch running" in text, text
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn end")
        await pilot.press("f2")
        await pilot.pause(0.3)
        assert "excluding the ubatch running" not in screen_text(app)  # a finished turn's sum is the TTFT's


QUIET_PROBE = "CPU probe (2 threads, 2026-12-03 13:00, FLOPS of llama.cpp q4_1 matmul, CPU 3% busy before it)"


MEMORY = MemorySample(engine_rss=251 * 2**20, ui_rss=61 * 2**20,
                      system=SystemMemory(24 * 2**30, 22 * 2**30, 2 * 2**30, 0, 2**30),
                      gpus=(), gpu_note="no NVIDIA GPU (NVML Shared Library Not Found)")
BAD_END = re.compile(r"(\d[x%]?|\b(of|the|at|a|per|to|in))$")  # a line ending in a number or a word that leads
BAD_START = re.compile(r"^(s|ms|tok/s|tok|MiB|GiB|x|it|of it)\b")  # one starting with a unit or "it"


def bad_breaks(lines: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in zip(lines, lines[1:]) if a.strip() and b.strip()
            and (BAD_END.search(a.rstrip()) or BAD_START.match(b.lstrip()))]


def test_flow_never_parts_a_number_from_its_unit_or_a_short_phrase():
    """The trial's three: "inside the forecast 383 ms–1.10" above "s", F2's "measured
    0.66x of" above "it", decode's "each verify pass of 49" above "costs"."""
    from kvtop.tui.base.flow import flow
    from kvtop.tui.base.format import pack

    texts = {"TTFT 512 ms inside the forecast 383 ms–1.10 s; decode 31.2 tok/s inside 28.0–35.5 tok/s": "1.10 s",
             "Time to first token: 1.51 s  ·  forecast 2.29 s (calibrated on 3 turns, 80% 1.80 s–2.90 s), "
             "measured 0.66x of it": "0.66x of it"}
    for text, phrase in texts.items():
        for width in range(24, 100):
            lines = [line.plain for line in flow(text, width)]
            assert all(len(line) <= width for line in lines), (width, lines)
            assert " ".join(lines).split() == text.split(), (width, lines)  # nothing lost
            assert bad_breaks(lines) == [], (width, lines)
            assert any(phrase in line for line in lines), (width, lines)
    phrases = ["speculation cost 6%:", "71% of 48 drafted accepted,", "each verify pass of 49 tok",
               "costs 35.1x a plain step"]
    for width in range(30, 100):
        lines = [line.plain for line in pack(phrases, width, " ")]
        assert bad_breaks(lines) == [] and any("pass of 49 tok" in line for line in lines), (width, lines)


async def test_no_pane_s_prose_breaks_inside_a_phrase_and_the_hardware_line_keeps_its_figures_at_any_size(
        tmp_path, smollm_shaped):
    """Textual's word-wrap broke the Estimate verdict's "decode at 0.55x of the" above
    "ceiling" at 160x48 and F2's title where it fell; the panes and F2 break their prose
    themselves now (tui/base/flow.py).

    And at 160x48 after a turn the hardware line took its short form, "hardware: CPU
    probe": no figure, and nothing said it was cut. The figures come first now, so the
    short form keeps them. (Two tests before, each starting the App at the three sizes.)"""
    import dataclasses

    from helpers import FIXED_HW

    for size in ((80, 24), (120, 40), (160, 48)):
        loaded = smollm_loaded(smollm_shaped)
        turns = [scripted_turn(1, 1000.0, 600, 0, [" w"] * 40, timeline=True)]
        app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2), lambda s: ScriptedEngine(s, loaded, turns),
                       tmp_path, live_system=False, write_transcript=False,
                       hardware=dataclasses.replace(FIXED_HW, source=QUIET_PROBE))
        async with app.run_test(size=size) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            await send(pilot, "Hi")
            await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
            await pilot.pause(0.3)
            pane = app.dash.estimate
            for _ in range(4):  # its page, at 80x24
                if pane.display and pane.content_region.width > 0:
                    break
                await pilot.press("f6")
                await pilot.pause(0.2)
            text = pane.render().plain.replace("\n", " ")
            assert "hardware: 30.0 GB/s, 0.25 TFLOPS · CPU probe" in text, (size, text)
            shown = [line for line in screen_text(app).split("\n")]
            prose = pane.render().plain.split("\n")[7:]  # under the table
            assert prose and all(any(p in line for line in shown) for p in prose), (size, prose)  # drawn as flowed
            assert bad_breaks(prose) == [], (size, prose)
            await pilot.press("f2")
            await pilot.pause(0.3)
            for wid in ("#waterfall-title", "#waterfall-verdict"):
                w = app.screen.query_one(wid)
                lines = w.render().plain.split("\n")
                assert all(len(line) <= w.content_region.width for line in lines), (size, wid, lines)
                assert bad_breaks(lines) == [], (size, wid, lines)


async def test_the_memory_pane_s_peak_and_the_estimate_pane_s_are_one_figure_after_f7(tmp_path, smollm_shaped,
                                                                                        monkeypatch):
    """After F7 the Memory pane read "peak 865 MiB" (its measurement's contexts) beside
    the Estimate pane's "peak mem 281 MiB" (the chat's, at the last turn's end). The peak
    both show is the chat's; what F7 reached is said apart, as F7's."""
    import dataclasses

    from kvtop.tui.turn import cpu_watch

    rss = {"now": 281 * 2**20}
    monkeypatch.setattr(cpu_watch, "take_sample", lambda *a, **k: dataclasses.replace(MEMORY, engine_rss=rss["now"]))
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2),
                   lambda s: ScriptedEngine(s, loaded, [scripted_turn(1, 1000.0, 40, 0, ["Hi", "."])]), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.cpu_watch.sample()
        await send(pilot, "Hi")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        rss["now"] = 300 * 2**20  # after the turn's end: the chat's peak moved on
        app.cpu_watch.sample()
        app.quality.turn_id, app.quality.engine = 99, app.session.engine  # F7 measuring
        assert app.quality.running
        rss["now"] = 865 * 2**20
        app.cpu_watch.sample()
        app.quality.turn_id = None
        rss["now"] = 290 * 2**20
        app.cpu_watch.sample()
        await pilot.pause(0.2)
        memory = app.dash.memory.render().plain.replace("\n", " ")
        assert "peak 300 MiB" in memory and "(865 MiB while F7 measured)" in memory, memory
        assert app.dash.estimate.rows.peak.measured == 300 * 2**20
        estimate = app.dash.estimate.render().plain
        assert any(line.startswith("peak mem") and "300 MiB" in line for line in estimate.split("\n")), estimate


async def test_the_header_keeps_refresh_at_160_columns_after_a_turn_on_fewer_threads(tmp_path, smollm_shaped):
    """At 160 columns, after a turn that ran on the free core of a busy machine, the
    header dropped "refresh 1 s": "threads 2/2 (all 2 usable cores; last turn 1/1)" took
    the room. "usable" goes first (the figures stay as they read at every width)."""
    from kvtop.tui.panes.status import StatusBar

    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2, threads_why="all 2 usable cores"),
                   lambda s: ScriptedEngine(s, loaded, []), tmp_path, live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        bar = app.query_one(StatusBar)
        bar.set_turn_threads(1, 1, (2, 2), "all 2 usable cores")
        await pilot.pause()
        text = bar.render().plain
        assert len(text) <= 160 and "refresh 1 s" in text, text
        assert "threads 2/2 (all 2 cores; last turn 1/1)" in text and "arch llama" in text, text
        assert screen_text(app).split("\n")[0].rstrip().endswith("refresh 1 s")  # drawn, not cut at the edge


def test_the_range_verdict_has_a_short_form_for_a_full_pane():
    """At 160x48 on a busy machine the range verdict took three lines and the hardware
    line under it was folded away."""
    from kvtop.tui.panes.estimate import ranged_short

    both = "TTFT 1.05 s, inside the forecast 509 ms–1.88 s; decode 28.6 tok/s, inside 11.0 tok/s–40.6 tok/s"
    assert ranged_short(both) == "TTFT and decode inside the forecast's 80% range"
    mixed = "TTFT 2.90 s, outside the forecast 1.10 s–1.60 s; decode 28.6 tok/s, inside 11.0 tok/s–40.6 tok/s"
    assert ranged_short(mixed) == "TTFT outside, decode inside the forecast's 80% range"
    assert ranged_short("TTFT 2.90 s, outside the forecast 1.10 s–1.60 s") == "TTFT outside the forecast's 80% range"


def test_the_kv_pane_s_quality_row_keeps_both_figures_at_80x24():
    """At 80x24 the row read "KLD q8_0 0.0056 (−47%) · q4_0 0.0911 (−…": the savings go
    before a figure does."""
    from kvtop.tui.panes.kv import KVPane

    pane = KVPane()
    pane.set_quality(["q8_0/q8_0: KLD 0.0056 …", "q4_0/q4_0: KLD 0.0911 …"], ["q8_0 0.0056 (−47%)", "q4_0 0.0911 (−72%)"])
    assert pane._quality_rows(40)[0].plain == "KLD q8_0 0.0056 · q4_0 0.0911"
    assert pane._quality_rows(60)[0].plain == "KLD q8_0 0.0056 (−47%) · q4_0 0.0911 (−72%)"


async def test_a_late_micro_batch_that_is_not_the_last_holds_the_eta_where_it_was():
    """Seen in tmux on a busy machine: the second of five micro-batches ran late and the
    ETA jumped from 14 s to 43 s (the pace-with-the-wait is for the last batch only)."""
    clock = Clock()
    async with PrefillApp(clock).run_test(size=(80, 12)) as pilot:
        pane = pilot.app.query_one(PrefillPane)
        pane.begin(ev.TurnStarted(1, 2133, 0, 4096, "gguf", None, 0.002, 0.0005, None, 1.0))
        pane.progress(ev.PrefillProgress(1, 512, 2133, 0, 6.54, 78.3, 512, 6.54, 2.0))
        for waited in (3.0, 7.0, 12.0):
            clock.now = 100.0 + waited
            pane.tick(clock.now)
            await pilot.pause()
            assert 14.0 <= pane.eta() <= 20.8, (waited, pane.eta())  # 1,109 tokens after the batch in flight
