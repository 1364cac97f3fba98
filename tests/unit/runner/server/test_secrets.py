"""The API key and a URL's user:password never leave memory (issue 21, item 4): taken
apart where they enter (the key and the login only in the Authorization header, every
URL kept without the login), and scrubbed by the one redaction module from whatever a
writer or the screen is handed anyway. A real HTTP server on loopback checks what goes
on the wire."""

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kvtop.runner.records.trace import TraceWriter
from kvtop.runner.records.transcript import Transcript
from kvtop.runner.redact import scrub, scrub_argv, scrub_value
from kvtop.runner.sanitize import clean_line, clean_text
from kvtop.runner.server.credentials import Credentials, client_auth, split_login
from kvtop.runner.server.http import ServerClient, ServerError

KEY = "sk-SECRET123"
PASSWORD = "pw-SECRET"


def test_a_login_is_taken_out_of_the_url_where_it_enters():
    assert split_login("http://alice:pw-SECRET@127.0.0.1:8080/v1") == ("http://127.0.0.1:8080/v1",
                                                                      ("alice", "pw-SECRET"))
    assert split_login("alice:p%40ss@host:8080") == ("http://host:8080", ("alice", "p@ss"))
    assert split_login("http://127.0.0.1:8080") == ("http://127.0.0.1:8080", None)
    creds = Credentials(KEY)
    assert creds.add("http://alice:pw-SECRET@127.0.0.1:9/") == "http://127.0.0.1:9"
    assert creds.headers("http://127.0.0.1:9") == {"Authorization": f"Bearer {KEY}"}  # the key wins
    basic = Credentials(None)
    url = basic.add("https://bob:pw-SECRET@proxy.example:443")
    token = base64.b64encode(b"bob:pw-SECRET").decode()
    assert url == "https://proxy.example:443" and basic.headers(url) == {"Authorization": f"Basic {token}"}
    for shown in (repr(creds), str(creds), repr(basic)):
        assert KEY not in shown and PASSWORD not in shown and "hidden" in shown


def test_options_never_show_the_key():
    from kvtop.tui.base.options import AppOptions

    shown = repr(AppOptions(servers=("http://127.0.0.1:9",), api_key=Credentials(KEY)))
    assert KEY not in shown


class _Echo(BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):
        _Echo.seen.append(self.headers.get("Authorization"))
        body = json.dumps({"status": "ok", "url": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_the_login_goes_on_the_wire_as_a_header_and_nowhere_else():
    server = HTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    _Echo.seen.clear()
    try:
        client = ServerClient(f"http://alice:{PASSWORD}@127.0.0.1:{port}")
        assert client.url == f"http://127.0.0.1:{port}"
        assert client.get_json("/health")["url"] == "/health"
        client.close()
        keyed = ServerClient(f"127.0.0.1:{port}", KEY)
        keyed.get_json("/health")
        keyed.close()
    finally:
        server.shutdown()
        server.server_close()
    assert _Echo.seen == ["Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode(), f"Bearer {KEY}"]


def test_an_error_names_the_server_without_its_login():
    with pytest.raises(ServerError) as err:
        ServerClient(f"http://alice:{PASSWORD}@127.0.0.1:1", KEY).get_json("/health")
    assert "127.0.0.1:1" in str(err.value) and PASSWORD not in str(err.value) and "alice" not in str(err.value)
    with pytest.raises(ServerError) as err:
        client_auth(f"ftp://alice:{PASSWORD}@host", None)
    assert PASSWORD not in str(err.value)


def test_one_module_scrubs_every_form_a_writer_gives_a_secret():
    Credentials('sk-"quoted"<&>')  # a key with characters JSON and XML escape
    Credentials(KEY)
    assert scrub(f"server said: bad key {KEY}") == "server said: bad key <redacted>"
    assert scrub(json.dumps({"k": 'sk-"quoted"<&>'})) == '{"k": "<redacted>"}'
    assert scrub("<text>sk-&quot;quoted&quot;&lt;&amp;&gt;</text>") == "<text><redacted></text>"
    assert scrub("GET http://alice:pw@10.0.0.5/x") == "GET http://<redacted>@10.0.0.5/x"
    assert scrub_value({"a": [KEY, 3], KEY: None}) == {"a": ["<redacted>", 3], "<redacted>": None}
    assert scrub_argv(["kvtop", "--server", "http://a:b@h:1", "--api-key", "xyz", "--api-key=abc", "-c", "9"]) == [
        "kvtop", "--server", "http://<redacted>@h:1", "--api-key", "<redacted>", "--api-key=<redacted>", "-c", "9"]
    # the screen: errors, notices and chat lines all pass clean_line / clean_text
    assert clean_line(f"401 from http://alice:x@h: key {KEY}") == "401 from http://<redacted>@h: key <redacted>"
    assert clean_text(f"model says {KEY}") == "model says <redacted>"
    Credentials("abcd")  # too short to look for in free text: "abcd" stays a word
    assert scrub("abcdef") == "abcdef"


def test_a_key_of_digits_breaks_no_number_in_a_file(tmp_path):
    """A secret is replaced in the files' text, never in their numbers or structure: a key
    of digits inside a count, or one spelling a JSON literal, leaves the trace readable and
    the SVG's coordinates numbers."""
    from kvtop.runner.redact import scrub_json, scrub_svg

    Credentials("123456")
    Credentials("nullnull")
    line = json.dumps({"n": 91234567, "m": None, "s": "key 123456", "t": [True, "nullnull"]})
    assert json.loads(scrub_json(line)) == {"n": 91234567, "m": None, "s": "key <redacted>", "t": [True, "<redacted>"]}
    report = json.dumps([{"avg_ns": 123456, "note": "123456"}], indent=2)
    assert json.loads(scrub_json(report)) == [{"avg_ns": 123456, "note": "<redacted>"}]
    jsonl = "\n".join(json.dumps({"a": 123456, "b": "x123456"}) for _ in range(2))
    assert [json.loads(x) for x in scrub_json(jsonl).splitlines()] == [{"a": 123456, "b": "x<redacted>"}] * 2
    svg = '<svg width="1234567"><text x="123456" class="r123456">key 123456</text></svg>'
    assert scrub_svg(svg) == '<svg width="1234567"><text x="123456" class="r123456">key <redacted></text></svg>'
    trace = TraceWriter(str(tmp_path / "t.jsonl"), {"argv": ["kvtop"], "settings": {"n_ctx": 1234560}})
    trace.user("my pin is 123456")
    trace.close()
    header, user = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert header["settings"] == {"n_ctx": 1234560} and user == {"type": "user", "text": "my pin is <redacted>"}


def test_the_trace_and_the_session_file_never_write_a_secret_they_are_handed(tmp_path):
    """The second line of defence: even given the raw argv and a URL with its login, the
    writers put neither on disk."""
    from kvtop.runner import events as ev

    Credentials(KEY)
    split_login(f"http://alice:{PASSWORD}@127.0.0.1:8080")
    argv = ["kvtop", "--server", f"http://alice:{PASSWORD}@127.0.0.1:8080", "--api-key", KEY]
    trace = TraceWriter(str(tmp_path / "t.jsonl"), {"argv": argv, "settings": {"model": f"key {KEY}"}})
    trace.event(ev.EngineWarning(f"the server echoed {KEY}"))
    trace.user(f"my key is {KEY}")
    trace.close()
    t = Transcript(str(tmp_path), {"argv": argv, "model": f"http://alice:{PASSWORD}@127.0.0.1:8080"})
    t.turn(f"key {KEY}?", f"it is {KEY}", "eog", None)
    t.close()
    for path in (tmp_path / "t.jsonl", t.path):
        text = open(path).read()
        assert KEY not in text and PASSWORD not in text and "<redacted>" in text
        assert "127.0.0.1:8080" in text or path == tmp_path / "t.jsonl"
    header = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert header["argv"] == ["kvtop", "--server", "http://<redacted>@127.0.0.1:8080", "--api-key", "<redacted>"]
