"""A full context on screen: the chat pane's dim line says which turns went and what it
cost the cache, the prefill pane shows reused against recomputed, F2 says why the prefix
broke; the trace records the shift and a replay shows it again."""

import dataclasses

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.records.replay import ReplayEngine
from kvtop.runner.records.trace import read_trace
from kvtop.runner.settings import Settings
from kvtop.tui.panes.chat import ChatLog, ChatMessage
from kvtop.tui.panes.prefill import PrefillPane

LINE = "context full: dropped turns 1–2 (1,234 tokens); cache prefix broke at token 87, recomputing 1,100 tokens"


def _shifted_turn(turn_id: int, t0: float) -> list:
    """As the engine reports a turn whose prompt left turns 1-2 out: the event, then a
    prefill of the 1,100 tokens after the kept 87."""
    shift = ev.ContextShifted(turn_id, (1, 2), 1234, 87, 1187, 87, 87, 4096, t0)
    script = scripted_turn(turn_id, t0, 1187, 87, ["Yes", "."], pp_tok_s=400.0)
    script[0] = dataclasses.replace(script[0], first_diff_index=87)
    done = script[-1]
    m = done.metrics
    segs, at = [], 0.0
    for label, dt in [("wait for engine", 0.0), ("template", 0.002), ("tokenize", 0.0005),
                      ("context shift (dropped turns 1–2)", 0.004), ("cache lookup (87 reused)", 0.0005)] + [
                      (f"ubatch {i + 1} ({n} tok)", dt) for i, (n, dt) in enumerate(m.ubatches)] + [
                      ("first decode+sample", 0.0067), ("first visible char", 0.0001)]:
        segs.append((label, at, dt))
        at += dt
    script[-1] = dataclasses.replace(done, metrics=dataclasses.replace(m, timeline=tuple(segs), ttft_s=at))
    return [shift] + script


def _turns() -> list:
    return [scripted_turn(1, 1000.0, 600, 0, ["A", "."]), scripted_turn(2, 1010.0, 1300, 600, ["B", "."]),
            _shifted_turn(3, 1020.0)]


def _app(tmp_path, smollm_shaped, **kw):
    loaded = smollm_loaded(smollm_shaped)
    return make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2), lambda s: ScriptedEngine(s, loaded, _turns()),
                    tmp_path, live_system=False, write_transcript=False, **kw)


def _notes(app) -> list[str]:
    return [m.text for m in app.query_one(ChatLog).query(ChatMessage) if m.role == "note"]


async def _chat(pilot, n: int) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None, what="load")
    for i in range(n):
        await send(pilot, f"question {i + 1}")
        await wait_until(pilot, lambda: len(app.turns) == i + 1 and not app.turn_running, what=f"turn {i + 1}")


async def test_the_chat_pane_says_which_turns_were_dropped_and_what_it_cost(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped, record_trace=False)
    async with app.run_test(size=(200, 60)) as pilot:
        await _chat(pilot, 2)
        assert _notes(app) == []  # turns that fit say nothing
        await _chat_more(pilot, 3)
        assert _notes(app) == [LINE]
        roles = [m.role for m in app.query_one(ChatLog).query(ChatMessage)]
        assert roles[-3:] == ["user", "note", "assistant"]  # above the reply it concerns
        text = screen_text(app)
        assert "context full: dropped turns 1–2 (1,234 tokens)" in text
        pane = app.query_one(PrefillPane)
        assert pane.shift is not None and pane.shift.dropped_turns == (1, 2)
        shown = pane.render().plain.replace("\n", " ")  # broken between phrases at the pane's width
        assert "context full: dropped turns 1–2; prefix broke at 87: 87 reused, 1,100 recomputed (F2)" in shown
        assert "context full: dropped turns 1–2; prefix broke at 87" in text
        assert "cache diverged" not in text  # the shift says why, once
        assert app.session.turns[-1].context_shift.prefix_broken_at == 87
        assert app.session.turns[0].context_shift is None
        await pilot.press("f2")
        await pilot.pause()
        shift_line = str(app.screen.query_one("#waterfall-shift").render()).replace("\n", " ")  # flowed
        assert shift_line.startswith(LINE + " (the chat no longer fit the context")
        verdict = str(app.screen.query_one("#waterfall-verdict").render()).replace("\n", " ")
        assert verdict.startswith("context full: turns 1–2 were dropped, so the cached prefix broke at token 87 "
                                  "and 1,100 of 1,187 prompt tokens were recomputed"), verdict
        table = str(app.screen.query_one("#waterfall-table").render())
        assert "ubatch" in table
        await pilot.press("escape")
        # the chat keeps every message: the next turn decides again from all of it
        assert [m.content for m in app.session.messages if m.role == "user"] == [
            "question 1", "question 2", "question 3"]


async def _chat_more(pilot, upto: int) -> None:
    app = pilot.app
    for i in range(len(app.turns), upto):
        await send(pilot, f"question {i + 1}")
        await wait_until(pilot, lambda: len(app.turns) == i + 1 and not app.turn_running, what=f"turn {i + 1}")


async def test_the_trace_records_the_shift_and_a_replay_shows_it(tmp_path, smollm_shaped):
    trace_path = tmp_path / "shift.trace.jsonl"
    app = _app(tmp_path, smollm_shaped, trace_path=str(trace_path))
    async with app.run_test(size=(200, 60)) as pilot:
        await _chat(pilot, 3)
    trace = read_trace(str(trace_path))
    shifts = [o for k, o in trace.records if k == "event" and isinstance(o, ev.ContextShifted)]
    assert shifts == [ev.ContextShifted(3, (1, 2), 1234, 87, 1187, 87, 87, 4096, 1020.0)]
    kinds = [type(o).__name__ for k, o in trace.records if k == "event"]
    assert kinds.index("ContextShifted") == kinds.index("TurnStarted", kinds.index("ContextShifted")) - 1

    replay = make_app(trace.settings(), lambda s: ReplayEngine(trace, 0, s), tmp_path / "r", live_system=False,
                      write_transcript=False, record_trace=False, facts=trace.facts, hardware=trace.hardware)
    async with replay.run_test(size=(200, 60)) as pilot:
        await wait_until(pilot, lambda: len(replay.session.turns) == 3, what="the replayed turns")
        await pilot.pause()
        assert _notes(replay) == [LINE]
        assert replay.session.turns[-1].context_shift == shifts[0]
        assert "prefix broke at 87: 87 reused, 1,100 recomputed" in replay.query_one(PrefillPane).render().plain.replace("\n", " ")


def test_a_hostile_shift_record_is_refused(tmp_path):
    import json

    from kvtop.runner.records.trace import TraceError

    header = {"type": "kvtop-trace", "version": 1, "settings": {"model": "m"}}
    bad = {"turn_id": 1, "dropped_turns": [1, -5], "dropped_tokens": 3, "kept_tokens": 1, "prompt_tokens": 9,
           "reused_tokens": 1, "prefix_broken_at": None, "n_ctx": 256, "t": 1.0}
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(header) + "\n" + json.dumps({"type": "event", "event": "ContextShifted", "data": bad}) + "\n")
    try:
        read_trace(str(p))
    except TraceError as exc:
        assert "dropped_turns" in str(exc)
    else:
        raise AssertionError("a negative turn number was accepted")


def test_the_flags_use_llama_cpp_names_and_default_to_shifting(capsys):
    import pytest

    from kvtop.runner.settings import settings_from_args
    from kvtop.tui.start.launch import build_parser, launch_main

    def settings(*argv):
        return settings_from_args("m.gguf", build_parser().parse_args(list(argv)))

    assert (settings().context_shift, settings().keep) == (True, -1)
    assert settings("--no-context-shift").context_shift is False
    assert (settings("--context-shift", "--keep", "200").context_shift, settings("--keep", "200").keep) == (True, 200)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--keep", "-2"])
    capsys.readouterr()
    helptext = build_parser().format_help()
    assert "--context-shift" in helptext and "--no-context-shift" in helptext and "--keep N" in helptext
    # with --server the server decides: kvtop says so instead of ignoring the flag
    for flag in (["--no-context-shift"], ["--context-shift"], ["--keep", "64"]):
        with pytest.raises(SystemExit) as exc:
            launch_main(["--server", "http://127.0.0.1:9", *flag])
        assert exc.value.code == 2
        assert "llama-server's to decide with --server" in capsys.readouterr().err


async def test_the_border_says_a_draft_fits_once_the_oldest_turns_go(tmp_path, smollm_shaped):
    from kvtop.tui.base import messages as msg
    app = _app(tmp_path, smollm_shaped, record_trace=False)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.estimates.calibration is not None, what="load")
        prompt = app.query_one("#prompt")
        prompt.focus()
        prompt.insert_text_at_cursor("one more question")
        await wait_until(pilot, lambda: "fits" in str(prompt.border_subtitle or ""), timeout=10, what="the forecast")
        assert "oldest" not in str(prompt.border_subtitle)
        # as the engine answers when the shift would leave two turns out
        app.post_message(msg.PromptSized(ev.PromptMeasured(app.forecast_border.measure_id, 300, 250, 4096, 2)))
        await wait_until(pilot, lambda: "oldest" in str(prompt.border_subtitle or "") + str(prompt.border_title or ""),
                         timeout=5, what="the shift")
        below, above = str(prompt.border_subtitle), str(prompt.border_title)
        # below when the forecast line has room for it, else above (this prompt is 66 columns)
        assert below.endswith("; fits without the 2 oldest turns") or (
            above.endswith("context full: 2 oldest turns left out") and below.endswith("; fits")), (below, above)
