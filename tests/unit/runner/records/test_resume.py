"""``--resume``: the last transcript is found by what the file is, not by its name, and
read back whatever damage it took (issue 12)."""

import json
import os

from kvtop.runner.records.sessions import resume_last
from kvtop.runner.records.trace import TraceWriter
from kvtop.runner.records.transcript import Transcript, latest_session, read_messages


def transcript(folder, turns, started=None):
    t = Transcript(str(folder), {"model": "m.gguf"})
    for q, a in turns:
        t.turn(q, a, "eog", {"decode_tokens": 1})
    t.close()
    if started is not None:  # rewrite the header's start time (two transcripts in one second)
        lines = open(t.path, encoding="utf-8").read().splitlines(True)
        head = json.loads(lines[0])
        head["started"] = started
        lines[0] = json.dumps(head) + "\n"
        open(t.path, "w", encoding="utf-8").write("".join(lines))
    return t.path


def test_a_trace_beside_the_transcript_is_not_taken_for_it(tmp_path):
    """``trace-*.jsonl`` sorts after ``session-*.jsonl``: by name, --resume opened the
    trace and restored nothing."""
    path = transcript(tmp_path, [("What is a lighthouse?", "A tower with a light.")])
    TraceWriter(str(tmp_path / "trace-20991231-235959.jsonl"), {"argv": []}).close()
    (tmp_path / "zzz-notes.jsonl").write_text('{"type": "turn", "user": "x", "assistant": "y"}\n')
    assert latest_session(str(tmp_path)) == path
    messages, note = resume_last(str(tmp_path))
    assert [(m.role, m.content) for m in messages] == [
        ("user", "What is a lighthouse?"), ("assistant", "A tower with a light.")]
    assert note == f"resumed 1 turn from {os.path.basename(path)}"


def test_the_newest_transcript_is_the_one_started_last(tmp_path):
    old = transcript(tmp_path, [("old", "a")], started=1000.0)
    new = transcript(tmp_path, [("new", "b"), ("newer", "c")], started=2000.0)
    os.utime(old, (3000, 3000))  # a touched old file does not win
    assert latest_session(str(tmp_path)) == new
    assert resume_last(str(tmp_path))[1] == f"resumed 2 turns from {os.path.basename(new)}"


def test_nothing_to_resume_says_so(tmp_path):
    messages, note = resume_last(str(tmp_path / "missing"))
    assert messages == () and "no earlier session" in note and "nothing to restore" in note
    TraceWriter(str(tmp_path / "trace-1.jsonl"), {"argv": []}).close()
    messages, note = resume_last(str(tmp_path))
    assert messages == () and "no earlier session" in note


def test_a_transcript_that_ends_in_a_new_chat_restores_nothing_and_says_so(tmp_path):
    t = Transcript(str(tmp_path), {"model": "m"})
    t.turn("q", "a", "eog", {})
    t.event("new_chat")
    t.close()
    messages, note = resume_last(str(tmp_path))
    assert messages == () and note == f"--resume: no earlier session with turns in {tmp_path}: nothing to restore"


def test_resume_skips_newer_sessions_without_turns(tmp_path):
    """Issue 33: a launch that quit before its first turn (or ended in a new chat) left the
    newest transcript empty, and --resume said "nothing to restore" although the chat
    before it had turns."""
    real = transcript(tmp_path, [("What is a lighthouse?", "A tower with a light.")], started=1000.0)
    transcript(tmp_path, [], started=2000.0)  # launched, quit before a turn
    cleared = transcript(tmp_path, [("q", "a")], started=3000.0)
    with open(cleared, "a", encoding="utf-8") as fh:
        fh.write('{"type": "new_chat", "time": 3001}\n')
    assert latest_session(str(tmp_path)) == cleared  # the newest file is not the one to restore
    messages, note = resume_last(str(tmp_path))
    assert [m.content for m in messages] == ["What is a lighthouse?", "A tower with a light."]
    assert note == f"resumed 1 turn from {os.path.basename(real)}"


def test_a_torn_line_bad_bytes_and_unknown_records_are_skipped(tmp_path):
    path = transcript(tmp_path, [("q1", "a1")])
    with open(path, "ab") as fh:
        fh.write(b'{"type": "turn", "user": "caf\xe9 \xff", "assistant": "ok"}\n')  # not UTF-8
        fh.write(b'{"type": "tool_call", "name": "rm -rf"}\n')  # a record type kvtop never wrote
        fh.write(b'{"type": "turn", "role": "system", "user": 5, "assistant": ["x"]}\n')  # not text
        fh.write(b'[1, 2, 3]\n"just a string"\nnull\n')  # JSON, but not a record
        fh.write(b'{"type": "turn", "user": "q2", "assistant": "a2", "stop_reason": "eog"}\n')
        fh.write(b'{"type": "turn", "user": "q3", "assis')  # power cut mid-write
    msgs = read_messages(path)
    assert [m["content"] for m in msgs] == ["q1", "a1", "caf\ufffd \ufffd", "ok", "q2", "a2"]
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 3
    assert resume_last(str(tmp_path))[1].startswith("resumed 3 turns from ")


def test_a_header_with_absurd_numbers_or_bad_bytes_is_still_ordered(tmp_path):
    """``started`` is read from the file: NaN, 1e308, an int too big for a float, a string."""
    good = transcript(tmp_path, [("q", "a")], started=5000.0)
    for i, started in enumerate(["NaN", "1e999", "1" + "0" * 400, '"tomorrow"', "-Infinity"]):
        p = tmp_path / f"session-odd-{i}.jsonl"
        p.write_text('{"type": "session", "version": 1, "started": ' + started + '}\n'
                     '{"type": "turn", "user": "odd", "assistant": "odd"}\n')
        os.utime(p, (1000, 1000))
    (tmp_path / "session-binary.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    assert latest_session(str(tmp_path)) == good


def test_markup_in_a_transcript_is_kept_as_text(tmp_path):
    transcript(tmp_path, [("[b]x[/b] [@click=app.quit]q[/]", "[red]no[/red]")])
    messages, _note = resume_last(str(tmp_path))
    assert [m.content for m in messages] == ["[b]x[/b] [@click=app.quit]q[/]", "[red]no[/red]"]


def test_a_resumed_chat_is_restored_with_the_turns_after_it(tmp_path):
    """A session opened with --resume writes the restored chat first: the next --resume
    restored only the turns after it."""
    from kvtop.runner.process.commands import ChatMessage

    t = Transcript(str(tmp_path), {"model": "m"})
    t.resumed((ChatMessage("user", "q1"), ChatMessage("assistant", "a1")))
    t.turn("q2", "a2", "eog", {})
    t.close()
    assert [m["content"] for m in read_messages(t.path)] == ["q1", "a1", "q2", "a2"]
    with open(t.path, "a", encoding="utf-8") as fh:  # a second, odd record is not a resume: ignored
        fh.write('{"type": "resumed", "messages": [{"role": "system", "content": "x"}, 5, {"role": "user"}]}\n')
    assert [m["content"] for m in read_messages(t.path)] == ["q1", "a1", "q2", "a2"]
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"type": "session"}\n{"type": "resumed", "messages": [{"role": "user", "content": "u"}, '
                   '{"role": "system", "content": "s"}, {"role": "assistant", "content": 7}, '
                   '{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n')
    assert [m["content"] for m in read_messages(str(odd))] == ["q", "a"]


def test_resume_then_quit_without_a_turn_leaves_no_second_copy_of_the_chat(tmp_path):
    """``kvtop --resume`` then Ctrl+Q: the new session file listed the same turns as the
    one resumed, and ``kvtop sessions`` showed the chat twice. The restored chat is
    written with the session's first turn; until then it is only where it came from."""
    from kvtop.runner.process.commands import ChatMessage
    from kvtop.runner.records.sessions import list_sessions

    first = transcript(tmp_path, [("Where do papayas grow?", "In the tropics.")], started=1000.0)
    restored = tuple(ChatMessage(m["role"], m["content"]) for m in read_messages(first))
    again = Transcript(str(tmp_path), {"model": "m.gguf"})
    again.resumed(restored)
    again.event("new_chat")  # Ctrl+L and Ctrl+Z before any turn change nothing on disk either
    again.event("undo_new_chat")
    again.close()
    assert read_messages(again.path) == []
    listed = list_sessions(str(tmp_path), with_turns=True)
    assert [s.path for s in listed] == [first] and listed[0].turns == 1

    # a turn after the resume writes the restored chat first, and the events in their order
    later = Transcript(str(tmp_path), {"model": "m.gguf"})
    later.resumed(restored)
    later.event("new_chat")
    later.event("undo_new_chat")
    later.turn("And mangoes?", "Also warm places.", "eog", {})
    later.close()
    kinds = [json.loads(line)["type"] for line in open(later.path, encoding="utf-8")]
    assert kinds == ["session", "resumed", "new_chat", "undo_new_chat", "turn"]
    assert [m["content"] for m in read_messages(later.path)] == [
        "Where do papayas grow?", "In the tropics.", "And mangoes?", "Also warm places."]
