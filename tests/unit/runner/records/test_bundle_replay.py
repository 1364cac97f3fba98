"""``kvtop replay`` opens a Ctrl+E bundle (it said "line 1 is not JSON"), and with no
file it offers the last session's trace."""

import json
import os
import time

import pytest

from kvtop.runner.commands.bundle import trace_records
from kvtop.runner.records.replay import count_turns, latest_trace
from kvtop.runner.records.trace import TraceError, read_trace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def bundle_of(trace_path, out, indent=2, **extra):
    data = {"kvtop_bundle_version": 1, "redacted": False, "command_line": ["kvtop"],
            "trace": trace_records(trace_path), "screenshot_svg": "<svg/>", **extra}
    with open(out, "w") as fh:
        json.dump(data, fh, indent=indent)  # as Ctrl+E writes it: pretty-printed, no final newline
    return str(out)


@pytest.mark.parametrize("indent", [2, None], ids=["as-written", "one-line"])
def test_a_bundle_replays_as_its_trace(write_trace, tmp_path, indent):
    path = write_trace(tmp_path / "t.jsonl", turns=(("hi", ["Hello"]), ("more", ["Yes", "."])))
    bundle = bundle_of(path, tmp_path / "b.json", indent)
    a, b = read_trace(path), read_trace(bundle)
    assert b.header == a.header and [t for t, _ in b.turns()] == ["hi", "more"]
    assert [type(e) for _k, e in b.records] == [type(e) for _k, e in a.records]


def test_a_bundle_without_a_trace_or_a_bad_one_says_what_is_wrong(write_trace, tmp_path):
    path = write_trace(tmp_path / "t.jsonl")
    with pytest.raises(TraceError, match="holds no trace"):
        read_trace(bundle_of(path, tmp_path / "none.json", trace=None))
    records = trace_records(path)
    records[2]["data"]["n_ctx"] = -1
    with pytest.raises(TraceError, match=r"b\.json \(the bundle's trace\): line 3: Loaded: n_ctx is -1"):
        read_trace(bundle_of(path, tmp_path / "b.json", trace=records))
    (tmp_path / "other.json").write_text('{\n  "not": "kvtop"\n}')
    with pytest.raises(TraceError, match="not a kvtop trace"):
        read_trace(str(tmp_path / "other.json"))
    (tmp_path / "broken.json").write_text('{\n  "kvtop_bundle_version": 1,\n  "trace": [')
    with pytest.raises(TraceError, match="neither a kvtop trace nor a debug bundle"):
        read_trace(str(tmp_path / "broken.json"))


def test_latest_trace_is_found_by_its_header(write_trace, tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    old = write_trace(sessions / "trace-old.jsonl")
    new = write_trace(sessions / "zz-renamed.jsonl", turns=(("a", ["x"]), ("b", ["y"])))
    lines = open(old).read().splitlines(keepends=True)
    head = json.loads(lines[0])
    head["created"] = time.time() - 3600  # an hour older
    lines[0] = json.dumps(head) + "\n"
    open(old, "w").writelines(lines)
    (sessions / "session-x.jsonl").write_text('{"type": "session", "started": 9999999999}\n')  # a transcript
    (sessions / "junk.jsonl").write_text("not json\n")
    assert latest_trace(str(sessions)) == new and count_turns(new) == 2
    assert latest_trace(str(tmp_path / "missing")) is None
