"""``kvtop --server`` with a fleet that misbehaves, on screen: a blackhole, a server that
trickles its ``/metrics``, one whose numbers are hostile. Before: the pane waited for the
first poll forever, a negative "deferred -3" and ``n_ctx`` 1e15 were drawn as they came,
and quitting waited for the hanging poll.

Each row names its fault in one line while the healthy server's row and the server pane
go on; the hostile numbers are refused, never drawn; leaving the app does not wait for
the blackhole's poll. The servers are real sockets on 127.0.0.1; the request deadline is
1 s here (kvtop's is 10 s) so the test stays short.
"""

from __future__ import annotations

import threading
import time

import pytest
from fake_servers import METRICS, FakeServer, Reply, json_reply, llama_routes, slot
from helpers import make_app, wait_until

import kvtop.runner.server.http as http
from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.settings import Settings
from kvtop.tui.panes.fleet import FleetPane
from kvtop.tui.panes.server import ServerPane

HOSTILE_METRICS = METRICS.replace("requests_deferred 0", "requests_deferred -3").replace(
    "prompt_tokens_total 100", "prompt_tokens_total -5")


@pytest.fixture
def fleet():
    servers = [
        FakeServer(llama_routes(**{"/slots": json_reply([slot(0, n_ctx=int(1e15)), slot(1)]),
                                   "/metrics": Reply(HOSTILE_METRICS.encode(), content_type="text/plain")})),
        FakeServer(),
        FakeServer(blackhole=True),
        FakeServer(llama_routes(**{"/metrics": Reply(METRICS.encode(), content_type="text/plain", trickle_s=0.3)})),
    ]
    urls = [s.__enter__() for s in servers]
    yield urls
    for s in servers:
        s.__exit__(None, None, None)


async def test_a_misbehaving_fleet_names_each_fault_and_draws_no_hostile_number(tmp_path, smollm_shaped, fleet,
                                                                                monkeypatch):
    monkeypatch.setattr(http, "DEADLINE_S", 1.0)
    before = set(threading.enumerate())
    app = make_app(Settings(smollm_shaped, n_ctx=1024, n_threads=2), lambda s: ServerEngine(s, fleet[0]), tmp_path,
                   servers=tuple(fleet), live_system=False, write_transcript=False)
    async with app.run_test(size=(160, 50)) as pilot:
        rows = app.query_one(FleetPane)

        def row(i: int) -> str:
            return rows.render().plain.split("\n")[i + 1]

        await wait_until(pilot, lambda: "served.gguf" in row(1), timeout=5, what="the healthy row")
        assert "not polled yet" in row(2) or "unreachable" in row(2)  # the blackhole holds only its own row
        await wait_until(pilot, lambda: "unreachable: /slots did not answer in 1 s" in row(2), timeout=6,
                         what="the blackhole named")
        await wait_until(pilot, lambda: "/metrics sent" in row(3), timeout=6, what="the trickle named")
        assert row(3).rstrip().endswith("bytes in 1 s: too slow") and "served.gguf" in row(3)

        hostile = row(0)
        assert "/slots refused: slot 0 n_ctx 1,000,000,000,000,000 is more than any machine holds" in hostile
        assert "/metrics refused: prompt_tokens_total -5 is negative; requests_deferred -3 is negative" in hostile
        pane = app.query_one(ServerPane).render().plain  # the server on screen is the hostile one
        assert "slots: /slots refused: slot 0 n_ctx" in pane and "requests_deferred -3 is negative" in pane
        drawn = pane.replace("requests_deferred -3 is negative", "").replace("prompt_tokens_total -5 is negative", "")
        assert "-3" not in drawn and "-5" not in drawn and "deferred N/A" not in drawn
        t0 = time.monotonic()
    # leaving the app: the blackhole's poll (a daemon thread in its request) is not waited for
    assert time.monotonic() - t0 < 3.0
    # and the polls stop once the app is gone (the blackhole's ends by its deadline)
    deadline = time.monotonic() + 5.0
    while any(t.name.startswith("kvtop-") for t in set(threading.enumerate()) - before):
        assert time.monotonic() < deadline, [t.name for t in threading.enumerate()]
        time.sleep(0.05)
