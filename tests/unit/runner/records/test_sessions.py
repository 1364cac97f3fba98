"""``kvtop sessions`` and ``--resume FILE``'s selection: which transcripts are listed, in
which order, with which facts, and what a chosen file restores (issue 33)."""

import json
import os

import pytest

from kvtop.runner.records.sessions import ResumeError, list_sessions, newest_with_turns, read_session, resume_file
from kvtop.runner.records.trace import TraceWriter
from kvtop.runner.records.transcript import Transcript


def transcript(folder, turns, started, model="/models/SmolLM2-135M-Instruct.Q4_1.gguf", **header):
    t = Transcript(str(folder), {"model": model, **header})
    for q, a in turns:
        t.turn(q, a, "eog", {})
    t.close()
    lines = open(t.path, encoding="utf-8").read().splitlines(True)
    head = json.loads(lines[0])
    head["started"] = started
    lines[0] = json.dumps(head) + "\n"
    open(t.path, "w", encoding="utf-8").write("".join(lines))
    return t.path


def test_sessions_are_listed_newest_first_with_their_facts(tmp_path):
    old = transcript(tmp_path, [("What is the capital of France? Tell me in one short sentence please", "Paris.")],
                     1000.0)
    empty = transcript(tmp_path, [], 2000.0)
    new = transcript(tmp_path, [("Hello!", "Hi."), ("7 + 5?", "12.")], 3000.0, model="gemma.gguf")
    TraceWriter(str(tmp_path / "trace-29991231-000000.jsonl"), {"argv": []}).close()  # not a transcript
    (tmp_path / "notes.jsonl").write_text("not json\n")
    listed = list_sessions(str(tmp_path))
    assert [s.path for s in listed] == [new, empty, old]
    assert [s.turns for s in listed] == [2, 0, 1]
    assert [s.model for s in listed] == ["gemma.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                         "SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert [s.first_words() for s in listed] == ["Hello!", "(no turns)",
                                                 "What is the capital of France? Tell me …"]
    assert [s.path for s in list_sessions(str(tmp_path), with_turns=True)] == [new, old]
    assert newest_with_turns(str(tmp_path)).path == new
    assert list_sessions(str(tmp_path / "missing")) == [] and newest_with_turns(str(tmp_path / "missing")) is None


def test_newest_with_turns_skips_the_empty_and_the_cleared(tmp_path):
    real = transcript(tmp_path, [("q", "a")], 1000.0)
    transcript(tmp_path, [], 2000.0)
    cleared = transcript(tmp_path, [("q2", "a2")], 3000.0)
    with open(cleared, "a", encoding="utf-8") as fh:
        fh.write('{"type": "new_chat", "time": 3001}\n')
    assert read_session(cleared).turns == 0
    assert newest_with_turns(str(tmp_path)).path == real


def test_a_redacted_session_shows_no_words(tmp_path):
    flagged = transcript(tmp_path, [("a secret plan", "ok")], 1000.0, redacted=True)
    placeholder = transcript(tmp_path, [("<redacted: 143 chars>", "·")], 2000.0)
    assert read_session(flagged).first_words() == "(redacted)"
    assert read_session(placeholder).first_words() == "(redacted)"


def test_untrusted_text_is_one_clean_line(tmp_path):
    path = transcript(tmp_path, [("\x1b[31mred\x1b[0m\nsecond line [b]x[/b] " + "w" * 200, "a")], 1000.0,
                      model="\x1b]0;title\x07evil\n.gguf")
    s = read_session(path)
    words = s.first_words()
    assert "\x1b" not in words and "\n" not in words and words.startswith("red second line [b]x[/b] ")
    assert len(words) <= 60 and "\x1b" not in s.model and "\n" not in s.model


def test_resume_file_restores_the_chosen_one_by_path_or_name(tmp_path):
    chosen = transcript(tmp_path, [("old question", "old answer")], 1000.0)
    transcript(tmp_path, [("new question", "new answer")], 2000.0)
    for given in (chosen, os.path.basename(chosen)):
        messages, note = resume_file(given, str(tmp_path))
        assert [m.content for m in messages] == ["old question", "old answer"]
        assert note == f"resumed 1 turn from {os.path.basename(chosen)}"


def test_resume_file_refuses_what_it_cannot_restore(tmp_path):
    empty = transcript(tmp_path, [], 1000.0)
    trace = str(tmp_path / "trace-1.jsonl")
    TraceWriter(trace, {"argv": []}).close()
    cases = {str(tmp_path / "nope.jsonl"): "no such file", trace: "not a kvtop session transcript",
             str(tmp_path): "no such file", empty: "has no turns after its last new chat"}
    for given, why in cases.items():
        with pytest.raises(ResumeError, match=why):
            resume_file(given, str(tmp_path))
