"""Token times in server mode come from the server's own decode clock, so tokens that
arrive together (held in a proxy, or read late by a busy client) do not draw a spike
of thousands of tok/s on the decode chart (seen at 120x40 after a stall)."""

from __future__ import annotations

import pytest

from kvtop.runner import events as ev
from kvtop.runner.server.stream import TurnTranslator
from kvtop.tui.base.decode_series import DecodeSeries


def chunk(i: int, ms: float | None) -> dict:
    c = {"content": f"t{i}"}
    if ms is not None:
        c["timings"] = {"prompt_n": 10, "cache_n": 0, "predicted_n": i + 1, "predicted_ms": ms}
    return c


def tokens(arrivals, server_ms):
    out: list = []
    tr = TurnTranslator(1, 0.0, 4096, out.append)
    for i, (now, ms) in enumerate(zip(arrivals, server_ms)):
        tr.feed(chunk(i, ms), now)
    return [e for e in out if isinstance(e, ev.TokenEvent)]


def test_tokens_that_arrive_in_a_burst_keep_the_servers_pace():
    # 40 tokens made every 10 ms; the last 30 held up and delivered in the same millisecond
    ms = [10.0 * i for i in range(40)]
    arrivals = [1.0 + 0.010 * i for i in range(10)] + [1.5 + 0.00001 * i for i in range(30)]
    toks = tokens(arrivals, ms)
    series = DecodeSeries()
    for e in toks:
        series.add(e.pos, e.t)
    assert max(r for _, r in series.points) == pytest.approx(100, rel=0.05)
    # never later than the token arrived, never out of order
    assert all(e.t <= now + 1e-12 for e, now in zip(toks, arrivals))
    assert all(a.t <= b.t for a, b in zip(toks, toks[1:]))


def test_without_the_servers_timings_a_token_is_timed_when_it_arrives():
    arrivals = [1.0, 1.2, 1.3]
    assert [e.t for e in tokens(arrivals, [None] * 3)] == arrivals
