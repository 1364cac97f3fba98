"""What a new user's trial found on screen (the polish branch): each a wrong or
contradictory thing a test on the scripted engine now reads off the panes."""

import re

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.calibration.load import CPULoad
from kvtop.runner.settings import Settings

PARIS = ["The", " capital", " is", " Paris", "."]


def _app(tmp_path, model, turns, threads=2, speed=0.0):
    loaded = smollm_loaded(model)
    return make_app(Settings(model, n_ctx=4096, n_threads=threads),
                    lambda s: ScriptedEngine(s, loaded, turns, speed=speed), tmp_path, live_system=False,
                    write_transcript=False)


def shown_notices(app) -> list[str]:
    return [n.message for n in app._notifications]


async def test_ctrl_z_after_ctrl_l_brings_back_the_last_turns_panes_and_says_the_cache_is_empty(
        tmp_path, smollm_shaped):
    """After Ctrl+L then Ctrl+Z the chat and the Estimate pane came back, but the Prefill,
    KV and Decode panes said "no turn yet" beside a chat of one turn; the KV cache was
    empty (the next turn prefilled every token) and no pane said so."""
    turns = [scripted_turn(1, 1000.0, 40, 0, PARIS, pp_tok_s=40, tg_tok_s=24),
             scripted_turn(2, 2000.0, 60, 0, ["Berlin", "."]), scripted_turn(3, 3000.0, 20, 0, ["Sure", "."])]
    app = _app(tmp_path, smollm_shaped, turns)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "What is the capital of France?")
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn 1")
        await pilot.pause(0.2)
        prefill, decode = app.dash.prefill.render().plain, app.dash.decode.query_one("DecodeSummary").render().plain
        assert "40/40 tok" in prefill and "24.0 tok/s turn avg" in decode

        await pilot.press("ctrl+l")
        await pilot.pause(0.2)
        assert "no turn yet" in app.dash.prefill.render().plain  # a new chat: true of it
        assert shown_notices(app) == ["New chat. Ctrl+Z (or /undo) brings the last one back."]

        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "no turn yet" not in text, text
        prefill = app.dash.prefill.render().plain.replace("\n", " ")
        assert "40/40 tok" in prefill and "done" in prefill, prefill  # the last turn, as it was
        assert "KV cache cleared by Ctrl+L: the next turn prefills this chat again (≈44 tokens)" in prefill
        assert "0/4,096 cells" in app.dash.kv.render().plain  # the cache is empty, and says so
        assert "24.0 tok/s turn avg" in app.dash.decode.query_one("DecodeSummary").render().plain
        # the "New chat" notice no longer holds: the undo's replaces it, once
        assert shown_notices(app) == ["Chat of 1 turn brought back."]

        # the next turn prefills the chat, and the note goes with the turn it described
        await send(pilot, "And of Germany?")
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, what="turn 2")
        assert "KV cache" not in app.dash.prefill.render().plain
        # a new chat with a turn of its own, then undo: the cache holds that other chat
        await pilot.press("ctrl+l")
        await send(pilot, "Something else.")
        await wait_until(pilot, lambda: len(app.turns) == 3 and not app.turn_running, what="turn 3")
        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        prefill = app.dash.prefill.render().plain.replace("\n", " ")
        assert "60/60 tok" in prefill and "KV cache holds the other chat: the next turn prefills this chat again" in prefill
        # and back: the cache holds this one's turn, so there is nothing to say
        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        prefill = app.dash.prefill.render().plain
        assert "KV cache" not in prefill and "no turn yet" not in prefill, prefill
        assert len([n for n in shown_notices(app) if "brought back" in n]) == 1


BUSY_PROBE = ("CPU probe (2 threads, 2026-12-03 10:04, FLOPS of llama.cpp q5_K matmul, probed at 80% busy: at "
              "least 17.2 GB/s, 0.063 TFLOPS; taken again once quiet)")


async def test_at_160x48_a_busy_machines_estimate_pane_fits_its_rows_hardware_line_and_all(tmp_path, smollm_shaped):
    """At 160x48 on a busy machine the verdict, today's load and a CPU probe taken while
    busy took more than the pane's 19 lines: its last lines were folded into "…" and the
    hardware line was lost. Now the notes take their short forms, last first."""
    import dataclasses

    from helpers import FIXED_HW

    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(1, 1000.0, 40, 0, PARIS, pp_tok_s=40, tg_tok_s=24)]
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=0), lambda s: ScriptedEngine(s, loaded, turns),
                   tmp_path, live_system=False, write_transcript=False,
                   hardware=dataclasses.replace(FIXED_HW, source=BUSY_PROBE))
    async with app.run_test(size=(160, 48)) as pilot:
        app.cpu_watch.load_now = lambda: CPULoad.of_share(0.8, 2)
        app.cpu_watch.turn_others_share = lambda: 0.8
        await wait_until(pilot, lambda: app.loaded is not None and app.estimates.calibration is not None, what="load")
        await send(pilot, "What is the capital of France?")
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn")
        await pilot.pause(0.3)
        pane = app.dash.estimate
        text = pane.render().plain
        assert "…" not in text and len(text.split("\n")) <= pane.content_region.height, text
        assert "other processes used 80% of the CPU during this turn" in text.replace("\n", " ")  # the verdict
        assert "at today's load: other processes use 80% of the CPU" in text.replace("\n", " ")
        flat = text.replace("\n", " ")  # the hardware line in a short form: its figures first, said to be lower bounds
        assert re.search(r"hardware: 30\.0 GB/s, 0\.25 TFLOPS(: | · CPU probe at 80% busy: )lower bounds", flat), text


async def test_at_80x24_the_prompts_placeholder_and_a_replys_footer_are_whole(tmp_path, smollm_shaped):
    """At 80x24 the placeholder read "Message (Enter to send, F1 for" and a reply's footer
    "TTFT 523 ms · 7 tok · 30.1" above "tok/s · end of turn": each is whole now, its
    footer broken between phrases only."""
    from kvtop.tui.panes.chat import ChatMessage

    FOOTER_GAP = " · "

    turns = [scripted_turn(1, 1000.0, 40, 0, PARIS + [" It", " is", " big", "."], pp_tok_s=78.4, tg_tok_s=30.1)]
    app = _app(tmp_path, smollm_shaped, turns)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        prompt = app.dash.prompt
        await pilot.pause(0.1)
        assert len(prompt.placeholder) <= prompt.content_region.width, prompt.placeholder
        assert prompt.placeholder == "Message (Enter sends, F1 help)"
        await send(pilot, "What is the capital of France?")
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn")
        await pilot.pause(0.3)
        reply = [m for m in app.query(ChatMessage) if m.role == "assistant"][-1]
        phrases = reply.footer.split(FOOTER_GAP)
        assert "30.1 tok/s" in phrases
        width = reply.content_region.width
        drawn = [line.plain for line in reply.render().wrap(width)]
        footer_lines = drawn[drawn.index(next(x for x in drawn if x.startswith("TTFT"))):]
        for line in footer_lines:  # each line is whole phrases, as the footer has them
            assert all(p in phrases for p in line.split(FOOTER_GAP)), footer_lines


def test_the_waterfalls_measured_ttft_has_a_row_of_its_own_within_the_tables_width():
    """F2 at 80 columns: "sum of segments … 210 ms   TTFT measured 201" then "ms": the
    sum's row was wider than the table."""
    from kvtop.tui.turn.waterfall import waterfall_table

    metrics = scripted_turn(1, 1000.0, 40, 0, PARIS, pp_tok_s=200.0, timeline=True)[-1].metrics
    lines = waterfall_table(metrics, lambda tokens, depth: None).plain.split("\n")
    width = len(lines[0])
    assert all(len(line) <= width for line in lines), lines
    assert lines[-1].split()[:2] == ["TTFT", "measured"] and lines[-1].split()[-1] == "ms", lines[-1]


async def test_a_resumed_chat_says_its_next_turn_prefills_it(tmp_path, smollm_shaped):
    """``--resume``: the chat showed its turns and the Prefill pane only "no turn yet"."""
    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(1, 1000.0, 60, 0, ["Berlin", "."])]
    app = make_app(Settings(smollm_shaped, n_ctx=4096), lambda s: ScriptedEngine(s, loaded, turns), tmp_path,
                   live_system=False, write_transcript=False,
                   resume_messages=[{"role": "user", "content": "Capital of France?"},
                                    {"role": "assistant", "content": "Paris."}])
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        assert "KV cache empty: the next turn prefills the resumed chat" in app.dash.prefill.render().plain.replace(
            "\n", " ")
        await send(pilot, "And of Germany?")
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="turn")
        assert "KV cache" not in app.dash.prefill.render().plain
