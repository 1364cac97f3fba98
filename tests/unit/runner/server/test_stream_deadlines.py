"""A streamed reply has a deadline per event and one on progress: a server that trickles an
event a byte at a time (a slow-loris), or goes silent between events, ends the stream with
one line; a slow but honest server (whole events, seconds apart) is read to the end; Esc
(``close_stream``) ends a stream that waits, at once.

The deadlines are shortened here (kvtop's: ``STREAM_EVENT_S`` 10 s, ``STREAM_GAP_S``
120 s) so the tests stay fast; the servers are real sockets on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from fake_servers import FakeServer, Reply, llama_routes, nested

import kvtop.runner.server.http as http
from kvtop.runner.server.http import ServerClient, ServerError

TOKEN = json.dumps({"choices": [{"delta": {"content": "ok"}}]})
CEILING_S = 3.0


def stream(reply: Reply, **deadlines) -> tuple[list, ServerError | None, float]:
    """The events read and the error that ended the stream (or None), and how long it took."""
    got, err = [], None
    with FakeServer(llama_routes(**{"/v1/chat/completions": reply})) as url:
        t0 = time.monotonic()
        try:
            for e in ServerClient(url, deadline_s=1.0).stream_events("/v1/chat/completions", {}):
                got.append(e)
        except ServerError as exc:
            err = exc
        return got, err, time.monotonic() - t0


@pytest.fixture
def short_deadlines(monkeypatch):
    monkeypatch.setattr(http, "STREAM_EVENT_S", 1.0)
    monkeypatch.setattr(http, "STREAM_GAP_S", 1.5)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_slow_loris_event_ends_the_stream_after_the_first_token(short_deadlines, chunked):
    # the first token whole, then "[DONE]" one byte every 0.4 s (6 s): it ends at 1 s
    got, err, took = stream(Reply(events=[TOKEN, "[DONE]"], event_trickle_s=0.4, trickle_from=1, chunked=chunked))
    assert len(got) == 1 and took < CEILING_S
    assert str(err).startswith("/v1/chat/completions sent ") and str(err).endswith(" of an event in 1 s: too slow")


def test_a_silent_gap_between_events_ends_the_stream(short_deadlines):
    got, err, took = stream(Reply(events=[TOKEN, TOKEN], event_gap_s=4.0))
    assert len(got) == 1 and took < CEILING_S + 1.5
    assert str(err) == "/v1/chat/completions sent nothing for 1.5 s"


@pytest.mark.parametrize("chunked", [False, True])
def test_slow_whole_events_are_read_to_the_end(short_deadlines, chunked):
    got, err, _ = stream(Reply(events=[TOKEN] * 4 + ["[DONE]"], event_gap_s=0.6, chunked=chunked))
    assert err is None and len(got) == 4


def test_a_chunked_stream_without_done_ends_with_what_arrived():
    got, err, _ = stream(Reply(events=[TOKEN] * 3, chunked=True))
    assert err is None and len(got) == 3


def test_no_headers_is_named_at_the_request_deadline():
    got, err, took = stream(Reply(hang=True))
    assert got == [] and took < CEILING_S and str(err) == "/v1/chat/completions did not start its answer in 1 s"


def test_a_deeply_nested_chunk_is_one_line():
    got, err, _ = stream(Reply(events=[nested(100_000).decode()]))
    assert got == [] and str(err) == "/v1/chat/completions sent a chunk JSON nested more than 64 deep"


def test_close_stream_ends_a_waiting_stream_at_once():
    with FakeServer(llama_routes(**{"/v1/chat/completions": Reply(events=[TOKEN, TOKEN], event_gap_s=30)})) as url:
        client = ServerClient(url)
        got, ended = [], threading.Event()

        def read():
            try:
                for e in client.stream_events("/v1/chat/completions", {}):
                    got.append(e)
            except ServerError:
                pass
            ended.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + CEILING_S
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        client.close_stream()
        assert ended.wait(CEILING_S) and time.monotonic() - t0 < 1.0 and len(got) == 1
