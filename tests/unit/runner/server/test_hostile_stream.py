"""A server that streams what llama-server never would: chunks that are not JSON, not an
object, an error object, absurd or missing numbers, a line without end, a stream cut
before ``[DONE]``. Each turn ends with one line naming what was wrong (or finishes with
sane figures), and the engine takes the next turn: nothing reaches the panes unchecked.

The server here is a real HTTP server on a loopback port (a misbehaving proxy is what
sends such things); the well-behaved paths run against a real llama-server in tests/e2e.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from kvtop.runner import events as ev
from kvtop.runner.process.commands import Chat, ChatMessage
from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.server.http import MAX_LINE_BYTES
from kvtop.runner.settings import Settings

GOOD_TOKEN = {"choices": [{"delta": {"content": "ok"}}],
              "timings": {"prompt_n": 5, "prompt_ms": 10.0, "cache_n": 0, "predicted_n": 1, "predicted_ms": 1.0}}
STREAMS = {
    "not_json": ["{not json at all"],
    "not_object": ["[1, 2, 3]"],
    "error_object": [json.dumps({"error": {"message": "[bold]slot unavailable[/]"}})],
    "huge_line": None,  # filled in by the handler: one line over MAX_LINE_BYTES
    "absurd_numbers": [
        json.dumps({"prompt_progress": {"total": 1e308, "cache": -7, "processed": "12", "time_ms": -3}}),
        json.dumps({"prompt_progress": {"total": 40, "cache": -7, "processed": 40, "time_ms": 20.0}}),
        json.dumps({"choices": [{"delta": {"content": "fine"}}],
                    "timings": {"prompt_n": -40, "prompt_ms": float("1e300"), "cache_n": "x",
                                "predicted_n": True, "predicted_ms": None}}),
        json.dumps({"choices": [{"delta": {"content": None}, "finish_reason": 7}]}),
    ],
    "cut": [json.dumps(GOOD_TOKEN)],  # ends without [DONE]
    "good": [json.dumps(GOOD_TOKEN), json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]}), "[DONE]"],
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    script = "good"

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        name = type(self).script
        if name == "huge_line":
            self.wfile.write(b"data: {\"x\": \"" + b"a" * (MAX_LINE_BYTES + 10))
            return
        for data in STREAMS[name]:
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def hostile():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run_turns(url: str, scripts: list[str]) -> list[list[object]]:
    """One chat turn per script on one ServerEngine; the events of each turn."""
    engine = ServerEngine(Settings("served.gguf"), url)
    events: list[object] = []
    done = threading.Event()
    reader = threading.Thread(target=lambda: (engine.pump(events.append), done.set()), daemon=True)
    reader.start()
    per_turn = []
    for i, name in enumerate(scripts, 1):
        Handler.script = name
        start = len(events)
        engine.submit(Chat(i, (ChatMessage("user", "hi"),), time.monotonic()))
        deadline = time.monotonic() + 10
        while not any(isinstance(e, (ev.TurnDone, ev.EngineError, ev.TurnRefused)) for e in events[start:]):
            assert time.monotonic() < deadline, f"turn {name} never ended: {events[start:]}"
            time.sleep(0.01)
        per_turn.append(events[start:])
    engine.close()
    assert done.wait(5), "the engine's reader did not stop"
    return per_turn


def error_of(turn: list[object]) -> str:
    errors = [e.reason for e in turn if isinstance(e, ev.EngineError)]
    assert len(errors) == 1, turn
    return errors[0]


@pytest.mark.parametrize("name, says", [
    ("not_json", "sent a chunk that is not JSON: {not json at all"),
    ("not_object", "sent a chunk that is not a JSON object"),
    ("error_object", "the server reported an error: [bold]slot unavailable[/]"),
    ("huge_line", f"sent a line over {MAX_LINE_BYTES // 2**20} MiB"),
])
def test_a_bad_chunk_ends_the_turn_with_one_line_and_the_next_turn_works(hostile, name, says):
    bad, good = run_turns(hostile, [name, "good"])
    assert says in error_of(bad) and "the chat is kept" in error_of(bad)
    done = [e for e in good if isinstance(e, ev.TurnDone)]
    assert len(done) == 1 and done[0].text == "ok" and done[0].stop_reason == "eog"


def test_absurd_numbers_never_reach_the_panes(hostile):
    (turn,) = run_turns(hostile, ["absurd_numbers"])
    started = [e for e in turn if isinstance(e, ev.TurnStarted)]
    progress = [e for e in turn if isinstance(e, ev.PrefillProgress)]
    (done,) = [e for e in turn if isinstance(e, ev.TurnDone)]
    assert len(started) == 1 and started[0].prompt_tokens >= 0 and started[0].reused_tokens >= 0
    for p in progress:
        assert 0 <= p.done <= max(p.total, p.done) < 10**6 and p.reused >= 0 and p.elapsed_s >= 0
    m = done.metrics
    numbers = [m.prompt_tokens, m.reused_tokens, m.prefill_tokens, m.prefill_s, m.decode_tokens, m.decode_s]
    assert all(isinstance(x, (int, float)) and 0 <= x < 1e15 for x in numbers), numbers
    assert done.text == "fine" and done.stop_reason == "eog"


def test_a_stream_cut_before_done_ends_the_turn_with_what_arrived(hostile):
    (turn,) = run_turns(hostile, ["cut"])
    (done,) = [e for e in turn if isinstance(e, ev.TurnDone)]
    assert done.text == "ok" and done.metrics.prefill_tokens == 5
