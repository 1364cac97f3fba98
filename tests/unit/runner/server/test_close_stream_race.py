"""Closing a stream from another thread (Esc, a restart's ``engine.close``) while its
reader is between two reads. ``close_stream`` used to close the socket itself: a reader
that had already taken the socket's number for its next ``poll`` (CPython reads it with
the GIL held, then waits without it) then waited on whatever socket took that number
next (here a socket pair that never speaks) until the stream's 120 s gap deadline. That
held a whole test run's teardown for 117 s (tests/unit/tui/test_server_restart_ui.py:
asyncio joins the app's worker threads as its loop closes). Now only the reader closes
the socket; ``close_stream`` shuts it down, which wakes the reader wherever it is.

One core, as each pytest-xdist worker has (tests/conftest.py): the thread that closes
runs in the moment the reader lets the GIL go before its ``poll``."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
from fake_servers import FakeServer, Reply, llama_routes

from kvtop.runner.server.http import ServerClient, ServerError

TOKEN = json.dumps({"choices": [{"delta": {"content": "ok"}}]})
ROUNDS = 20


def _one_core():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs sched_setaffinity (Linux) to run the reader and the closer on one core")
    return min(os.sched_getaffinity(0))


def test_a_stream_closed_from_another_thread_always_wakes_its_reader():
    core = _one_core()
    before = os.sched_getaffinity(0)
    endless = Reply(events=[TOKEN] * 100_000, event_gap_s=0.002)
    stuck = []
    os.sched_setaffinity(0, {core})  # this thread; the reader sets its own
    try:
        with FakeServer(llama_routes(**{"/v1/chat/completions": endless})) as url:
            for i in range(ROUNDS):
                client = ServerClient(url)
                got, ended = [], threading.Event()

                def read(client=client, got=got, ended=ended):
                    os.sched_setaffinity(0, {core})
                    try:
                        for e in client.stream_events("/v1/chat/completions", {}):
                            got.append(e)
                    except ServerError:
                        pass
                    ended.set()

                threading.Thread(target=read, daemon=True).start()
                deadline = time.monotonic() + 10
                while len(got) < 3 and time.monotonic() < deadline:
                    time.sleep(0.005)
                client.close_stream()
                quiet = socket.socketpair()  # takes the lowest free numbers: the stream's, once closed
                if not ended.wait(2.0):
                    stuck.append(i)
                quiet[0].close()
                quiet[1].close()
                client.close()
                if stuck:
                    break
    finally:
        os.sched_setaffinity(0, before)
    assert not stuck, f"round {stuck[0]}: the reader still waits 2 s after close_stream"
