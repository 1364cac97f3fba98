"""What a redacted bundle keeps and what it leaves out, on plain data: the home folder,
the user and host names wherever they appear, the conversation replaced by its length,
the API key always (issue: sharing without leaking)."""

import json

from kvtop.runner.commands.bundle import trace_records
from kvtop.runner.records.trace import read_trace
from kvtop.runner.redact import Redactor, redact_text

R = Redactor(home="/home/alice", user="alice", host="alices-laptop.lan")


def test_text_becomes_its_length():
    assert redact_text("What is in my diary?") == "<redacted: 20 chars>"
    assert redact_text("a") == "<redacted: 1 char>"
    assert redact_text("") == ""  # an incomplete character's empty delta stays one


def test_home_user_and_host_wherever_they_appear():
    assert R.string("/home/alice/models/x.gguf") == "~/models/x.gguf"
    assert R.string("/home/alice") == "~"
    assert R.string("/home/alicex/m.gguf") == "/home/alicex/m.gguf"  # another user's home
    assert R.string("/mnt/alice/models/x.gguf") == "/mnt/<user>/models/x.gguf"
    assert R.string("cannot open '/home/alice/a.gguf' (owner alice)") == "cannot open '~/a.gguf' (owner <user>)"
    assert R.string("alices-laptop-x86_64-2") == "<host>-x86_64-2"  # the CPU probe's machine key
    assert R.string("recorded on alices-laptop") == "recorded on <host>"
    assert R.string("malice and alicetta") == "malice and alicetta"  # only whole names


def test_model_metadata_is_never_taken_for_a_user_name():
    r = Redactor(home="/home/llama", user="llama", host="box")
    data = r.value({"architecture": "llama", "name": "llama 3", "path": "/srv/llama/m.gguf",
                    "reason": "llama: failed"})
    assert data == {"architecture": "llama", "name": "llama 3", "path": "/srv/<user>/m.gguf",
                    "reason": "<user>: failed"}


def test_command_line():
    argv = ["/home/alice/.venv/bin/kvtop", "/home/alice/m.gguf", "-p", "my secret", "-sys", "be nice",
            "--prompt=another secret", "-pjoined", "--api-key", "sk-123", "--api-key=sk-456", "-c", "2048"]
    assert R.argv(argv) == ["~/.venv/bin/kvtop", "~/m.gguf", "-p", "<redacted: 9 chars>", "-sys",
                            "<redacted: 7 chars>", "--prompt=<redacted: 14 chars>", "-p<redacted: 6 chars>",
                            "--api-key", "<redacted>", "--api-key=<redacted>", "-c", "2048"]
    assert R.argv(["--server", "http://bob:hunter2@10.0.0.5:8080"], text=True) == [
        "--server", "http://<redacted>@10.0.0.5:8080"]  # a password in a URL, even with the text
    assert R.string("POST https://u:p@host/v1") == "POST https://<redacted>@host/v1"
    with_text = R.argv(argv, text=True)
    assert with_text[:7] == argv[:7] and with_text[8:11] == ["--api-key", "<redacted>", "--api-key=<redacted>"]


def test_a_redacted_trace_keeps_every_number_and_replays(write_trace, tmp_path):
    """Each trace line redacted: messages become lengths, reply tokens "·" with id 0 (an
    id or a length per token would give the reply back with the model's public
    vocabulary), numbers and structure stay, and the result reads back as a trace with
    the same events (issue 21, item 4)."""
    path = write_trace(tmp_path / "t.jsonl", turns=(("my diary", ["Dear", " diary"]),))
    records = [R.trace_record(x) for x in trace_records(path)]
    assert records[0]["redacted"] is True and "host" not in records[0]
    out = tmp_path / "redacted.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in records))
    plain, redacted = read_trace(path), read_trace(str(out))
    assert [t for t, _ in redacted.turns()] == ["<redacted: 8 chars>"]
    a = [e for _k, e in plain.records if _k == "event"]
    b = [e for _k, e in redacted.records if _k == "event"]
    assert [type(e) for e in a] == [type(e) for e in b]
    tokens_a = [e for e in a if type(e).__name__ == "TokenEvent"]
    tokens_b = [e for e in b if type(e).__name__ == "TokenEvent"]
    assert {e.token_id for e in tokens_a} != {0} and [e.text for e in tokens_a] == ["Dear", " diary"]
    assert [(e.token_id, e.text) for e in tokens_b] == [(0, "·"), (0, "·")]
    assert [(e.index, e.pos, e.t) for e in tokens_a] == [(e.index, e.pos, e.t) for e in tokens_b]
    assert [e.text for e in b if type(e).__name__ == "TurnDone"] == ["<redacted: 10 chars>"]
    assert [e.metrics for e in a if type(e).__name__ == "TurnDone"] == \
           [e.metrics for e in b if type(e).__name__ == "TurnDone"]
    assert "Dear" not in out.read_text()


def test_a_token_marker_stays_a_marker():
    """A negative id is no token (replay counts only ids >= 0): it stays negative."""
    rec = {"type": "event", "event": "TokenEvent",
           "data": {"turn_id": 1, "index": 0, "token_id": -7, "text": "x", "pos": 3, "t": 1.0}}
    assert R.trace_record(rec)["data"] == {"turn_id": 1, "index": 0, "token_id": -1, "text": "·", "pos": 3, "t": 1.0}


def test_a_short_host_name_is_still_taken_out_of_the_machine_key():
    """A new user's trial: on a host named "vm" the redacted bundle kept "machine":
    "vm-x86_64-2" (host names under 3 characters are not replaced in free text, where
    "vm" could be any word); the probe's machine key names the host whatever its length."""
    import platform

    from kvtop.runner.redact import Redactor

    r = Redactor(home="/home/alice", user="alice", host="vm")
    key = f"vm-{platform.machine()}-2"
    assert r.value({"machine": key}) == {"machine": f"<host>-{platform.machine()}-2"}
    assert r.string("a vm and vmware") == "a vm and vmware"  # free text keeps short words
