"""Ctrl+L keeps what it clears (issue 21, item 7): many users press Ctrl+L to redraw the
terminal and lost the chat. A new chat now puts the old one aside, the notice says how
to get it back, and Ctrl+Z (or /undo) does: the chat pane as it was, the messages the
next turn sends, the transcript that --resume reads and the trace a replay plays."""

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.process.commands import Reset
from kvtop.runner.records.replay import ReplayEngine
from kvtop.runner.records.trace import read_trace
from kvtop.runner.records.transcript import read_messages
from kvtop.runner.settings import Settings
from kvtop.tui.panes.chat import ChatLog, StreamTail

Q1, Q2, Q3, Q4 = "Where do PAPAYAS grow?", "And MANGOES?", "Which is sweeter?", "Something else."
R1, R2, R3, R4 = ["In ", "the ", "tropics."], ["Also ", "warm ", "places."], ["MANGOES ", "usually."], ["Sure."]
SLOW = [f"word{i} " for i in range(200)]  # 200 tokens at 20 tok/s: Ctrl+L lands mid-reply


def _app(tmp_path, model, turns, speed=0.0, **kw):
    loaded = smollm_loaded(model)
    engine = {}

    def factory(s):
        engine["e"] = ScriptedEngine(s, loaded, turns, speed=speed)
        return engine["e"]

    return make_app(Settings(model, n_ctx=4096), factory, tmp_path, live_system=False, **kw), engine


def chat_lines(app) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in app.query_one(ChatLog).children]


async def turn(pilot, text: str, n: int) -> None:
    await send(pilot, text)
    await wait_until(pilot, lambda: len(pilot.app.turns) == n and not pilot.app.turn_running, timeout=10,
                     what=f"turn {n}")


async def test_ctrl_l_then_ctrl_z_brings_the_chat_back_and_the_next_turn_sends_it(tmp_path, smollm_shaped):
    turns = [scripted_turn(i, 1000.0 * i, 30 * i, 0, r) for i, r in enumerate((R1, R2, R3, R4), 1)]
    app, engine = _app(tmp_path, smollm_shaped, turns)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await turn(pilot, Q1, 1)
        await turn(pilot, Q2, 2)
        before = chat_lines(app)
        footers = [m.footer for m in app.query_one(ChatLog).children]
        assert [r for r, _ in before] == ["user", "assistant", "user", "assistant"] and all(footers[1::2])

        await pilot.press("ctrl+l")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "PAPAYAS" not in text and app.session.messages == [] and chat_lines(app) == []
        assert "Ctrl+Z (or /undo) brings the last one back" in text  # the way back, said at once
        assert isinstance(engine["e"].commands[-1], Reset)  # the KV cache was cleared, as before

        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        assert chat_lines(app) == before  # as it was on screen: each reply with its footer
        assert [m.footer for m in app.query_one(ChatLog).children] == footers
        assert "PAPAYAS" in screen_text(app) and "tropics." in screen_text(app)
        assert [(m.role, m.content) for m in app.session.messages] == [
            ("user", Q1), ("assistant", "".join(R1)), ("user", Q2), ("assistant", "".join(R2))]

        # the next turn sends the whole restored chat; the engine keeps what its cache shares
        await turn(pilot, Q3, 3)
        sent = engine["e"].chats[-1]
        assert [m["content"] for m in sent] == [Q1, "".join(R1), Q2, "".join(R2), Q3]
        assert "MANGOES usually." in screen_text(app)

        # a new chat with a turn of its own, then undo: the chat on screen is put aside in
        # its place, so /undo (typed as a message) swaps back, and again: nothing is lost
        await pilot.press("ctrl+l")
        await turn(pilot, Q4, 4)
        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        assert len(app.session.messages) == 6 and chat_lines(app)[-1] == ("assistant", "MANGOES usually.")
        assert [m["content"] for m in engine["e"].chats[-1]] == [Q4]
        await send(pilot, "/undo")
        await pilot.pause(0.2)
        assert [m.content for m in app.session.messages] == [Q4, "".join(R4)] and len(chat_lines(app)) == 2
        await send(pilot, "/undo")
        await pilot.pause(0.2)
        assert len(app.session.messages) == 6 and "/undo" not in [m.content for m in app.session.messages]
        transcript, trace = app.session.transcript_path, app.session.trace.path

    # --resume reads the restored chat back, and a replay shows it
    assert [m["content"] for m in read_messages(transcript)] == [Q1, "".join(R1), Q2, "".join(R2), Q3,
                                                                 "".join(R3)]
    recorded = read_trace(trace)
    assert [k for k, _ in recorded.records if k in ("new_chat", "undo_new_chat")] == [
        "new_chat", "undo_new_chat", "new_chat", "undo_new_chat", "undo_new_chat", "undo_new_chat"]
    replay = make_app(recorded.settings(), lambda s: ReplayEngine(recorded, speed=0), tmp_path / "replay",
                      hardware=recorded.hardware, facts=recorded.facts, live_system=False,
                      write_transcript=False, record_trace=False)
    async with replay.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: len(replay.turns) == 4 and not replay.turn_running, what="replayed")
        await pilot.pause(0.3)
        assert [t for r, t in chat_lines(replay) if r in ("user", "assistant")] == [
            Q1, "".join(R1), Q2, "".join(R2), Q3, "".join(R3)]


async def test_undo_after_ctrl_l_cut_a_reply_puts_its_question_back(tmp_path, smollm_shaped):
    """Ctrl+L mid-reply: the chat put aside ends before the cut question (it has no
    reply); undo brings the chat back and the question into the prompt, and Enter asks it."""
    turns = [scripted_turn(1, 1000.0, 30, 0, R1), scripted_turn(2, 2000.0, 60, 0, SLOW, tg_tok_s=20),
             scripted_turn(3, 3000.0, 60, 0, R2)]
    app, engine = _app(tmp_path, smollm_shaped, turns, speed=1.0, write_transcript=False)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await turn(pilot, Q1, 1)
        await send(pilot, Q2)
        await wait_until(pilot, lambda: "word3" in app.query_one(StreamTail).text, timeout=10,
                         what="the reply streaming")
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: not app.turn_running and len(app.turns) == 2, timeout=10, what="the cut")
        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        assert chat_lines(app) == [("user", Q1), ("assistant", "".join(R1))]
        prompt = app.query_one("#prompt")
        assert prompt.value == Q2 and "Enter asks it again" in screen_text(app)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.turns) == 3 and not app.turn_running, timeout=10, what="asked again")
        assert [m["content"] for m in engine["e"].chats[-1]] == [Q1, "".join(R1), Q2]
        assert chat_lines(app)[-1] == ("assistant", "".join(R2))


async def test_undo_with_nothing_put_aside_or_during_a_turn_says_why(tmp_path, smollm_shaped):
    """Ctrl+L on an empty chat (a redraw) keeps what the last one put aside; undo with
    nothing to bring back, or while a turn runs, says why and changes nothing."""
    turns = [scripted_turn(1, 1000.0, 30, 0, R1), scripted_turn(2, 2000.0, 60, 0, SLOW, tg_tok_s=20)]
    app, _ = _app(tmp_path, smollm_shaped, turns, speed=1.0, write_transcript=False)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.press("ctrl+z")
        await pilot.pause(0.1)
        assert "No chat to bring back" in screen_text(app)
        await turn(pilot, Q1, 1)
        await pilot.press("ctrl+l")
        await pilot.press("ctrl+l")  # pressed again, to redraw: the chat put aside stays
        await pilot.pause(0.1)
        await send(pilot, Q2)
        await wait_until(pilot, lambda: app.turn_running, timeout=5, what="turn 2 running")
        await pilot.press("ctrl+z")
        await pilot.pause(0.1)
        assert "A turn is running" in screen_text(app) and app.session.messages[0].content == Q2
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.turn_running, timeout=10, what="the cancel")
        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        assert [m.content for m in app.session.messages] == [Q1, "".join(R1)]


async def test_undo_brings_the_estimate_pane_back_as_it_was(tmp_path, smollm_shaped):
    """The Estimate pane is part of what Ctrl+L clears (the cleared chat's last TTFT and
    verdict read as the new chat's), so it is part of what Ctrl+Z brings back: before, it
    stayed at the rows of a chat with no turn (no measured column, no forecast) beside the
    restored chat. A second Ctrl+Z swaps back to the new chat's own."""
    from kvtop.tui.panes.estimate import EstimatePane

    turns = [scripted_turn(i, 1000.0 * i, 30 * i, 0, r) for i, r in enumerate((R1, R2, R4), 1)]
    app, _ = _app(tmp_path, smollm_shaped, turns, write_transcript=False)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await turn(pilot, Q1, 1)
        await turn(pilot, Q2, 2)
        estimate = app.query_one(EstimatePane)
        before = estimate.render().plain
        assert estimate.rows.row("ttft").measured is not None

        await pilot.press("ctrl+l")
        await pilot.pause(0.2)
        assert estimate.render().plain != before and estimate.rows.row("ttft").measured is None
        await turn(pilot, Q4, 3)  # the new chat's own turn
        other = estimate.render().plain
        assert other != before

        await pilot.press("ctrl+z")
        await pilot.pause(0.2)
        assert estimate.render().plain == before

        await pilot.press("ctrl+z")  # back to the new chat: its own estimate
        await pilot.pause(0.2)
        assert estimate.render().plain == other


async def test_ctrl_l_cutting_the_first_turn_puts_its_question_back_in_the_prompt(tmp_path, smollm_shaped):
    """A new user's trial: Ctrl+L during a chat's first reply put nothing aside (the chat
    before the cut question is empty), said nothing, and Ctrl+Z answered "No chat to bring
    back": the question was lost. With nothing to bring back, it goes straight back into
    the prompt, and Enter asks it again."""
    turns = [scripted_turn(1, 1000.0, 30, 0, SLOW, tg_tok_s=20), scripted_turn(2, 2000.0, 30, 0, R1)]
    app, engine = _app(tmp_path, smollm_shaped, turns, speed=1.0, write_transcript=False)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, Q1)
        await wait_until(pilot, lambda: "word3" in app.query_one(StreamTail).text, timeout=10,
                         what="the reply streaming")
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: not app.turn_running, timeout=10, what="the cut")
        await pilot.pause(0.2)
        prompt = app.query_one("#prompt")
        assert prompt.value == Q1 and chat_lines(app) == []
        assert "question Ctrl+L cut is back in the prompt" in screen_text(app)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, timeout=10, what="asked again")
        assert [m["content"] for m in engine["e"].chats[-1]] == [Q1]
        assert chat_lines(app) == [("user", Q1), ("assistant", "".join(R1))]
