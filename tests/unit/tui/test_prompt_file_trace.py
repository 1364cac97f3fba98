"""``--prompt-file``: the message is sent before the trace exists (the trace opens once
the model is inspected); it must still be in the trace, before its turn's events, so a
replay shows it (issue 12). Also: a ``--prompt-file`` FIFO is refused."""

import os

from helpers import make_app, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.records.trace import read_trace
from kvtop.runner.settings import Settings


def scripted(smollm_shaped, tmp_path, **kw):
    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(1, 1.0, 40, 0, ["The", " sea."])]
    return make_app(Settings(smollm_shaped), lambda s: ScriptedEngine(s, loaded, turns), tmp_path,
                    live_system=False, write_transcript=False, **kw)


async def test_the_prompt_file_message_is_in_the_trace_before_its_turn(tmp_path, smollm_shaped):
    question = tmp_path / "question.txt"
    question.write_text("Describe the sea in two words.\n")
    trace_path = tmp_path / "run.trace.jsonl"
    app = scripted(smollm_shaped, tmp_path, prompt_file=str(question), trace_path=str(trace_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="the prompt file's turn")
    trace = read_trace(str(trace_path))
    kinds = [(k, type(o).__name__ if k == "event" else o) for k, o in trace.records]
    users = [i for i, (k, _o) in enumerate(kinds) if k == "user"]
    assert [kinds[i][1] for i in users] == ["Describe the sea in two words."]  # once
    started = kinds.index(("event", "TurnStarted"))
    assert users[0] < started
    assert [t for t, _events in trace.turns()] == ["Describe the sea in two words."]
    assert any(isinstance(e, ev.TurnDone) for e in trace.turns()[0][1])


async def test_a_prompt_file_fifo_is_refused_and_nothing_is_sent(tmp_path, smollm_shaped):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    app = scripted(smollm_shaped, tmp_path, prompt_file=str(fifo))
    notes = []
    notify = app.notify  # recorded from the start: the refusal may come before the first frame
    app.notify = lambda message, *a, **kw: (notes.append(str(message)), notify(message, *a, **kw))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: any("FIFO" in n for n in notes), timeout=10, what="the refusal")
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        assert app.engine.chats == [] and app.session.messages == []
        assert app.query_one("#prompt").value == ""
