"""Every exchange with a server ends by its deadline, however the server misbehaves, and
says in one line what went wrong. The servers are real sockets on 127.0.0.1
(``tests/fake_servers.py``): a trickle of a byte every 0.3 s, a hang after the request,
a blackhole that never reads, a port nobody accepts on, JSON nested 100,000 deep, a body
over the bound, a redirect.

The clients here have a 1 s deadline (kvtop's is ``DEADLINE_S``, 10 s) so the tests stay
fast; each asserts the request ended well before the trickle would have.
"""

from __future__ import annotations

import time

import pytest
from fake_servers import METRICS, FakeServer, Reply, json_reply, llama_routes, nested, props, silent_listener

from kvtop.runner.server.http import MAX_JSON_BYTES, ServerClient, ServerError
from kvtop.runner.server.props import read_server_info
from kvtop.runner.server.wire import TooDeep, json_depth, loads_bounded

CEILING_S = 3.0  # a 1 s deadline; the rest is room for a busy machine


def fails(client: ServerClient, path: str) -> tuple[ServerError, float]:
    t0 = time.monotonic()
    with pytest.raises(ServerError) as info:
        client.get_json(path) if path != "/metrics" else client.get_text(path)
    return info.value, time.monotonic() - t0


def test_a_trickle_fails_at_the_deadline_with_one_line_naming_the_bytes():
    slow = Reply(METRICS.encode(), content_type="text/plain", trickle_s=0.3)  # 160 bytes: 48 s at this pace
    with FakeServer(llama_routes(**{"/metrics": slow})) as url:
        err, took = fails(ServerClient(url, deadline_s=1.0), "/metrics")
    assert took < CEILING_S
    assert str(err).startswith("/metrics sent ") and str(err).endswith(" bytes in 1 s: too slow")
    assert "\n" not in str(err) and err.reached  # it answered: slow, not unreachable


@pytest.mark.parametrize("kind", ["hang", "blackhole", "backlog"])
def test_a_server_that_never_answers_fails_at_the_deadline(kind):
    if kind == "backlog":
        sock = silent_listener()
        url, stop = f"http://127.0.0.1:{sock.getsockname()[1]}", sock.close
    else:
        server = FakeServer(llama_routes(**{"/slots": Reply(hang=True)}), blackhole=kind == "blackhole")
        url, stop = server.__enter__(), lambda: server.__exit__(None, None, None)
    try:
        err, took = fails(ServerClient(url, deadline_s=1.0), "/slots")
    finally:
        stop()
    assert took < CEILING_S
    assert str(err) == "/slots did not answer in 1 s" and not err.reached


def test_a_closed_port_is_unreachable_at_once():
    sock = silent_listener()
    port = sock.getsockname()[1]
    sock.close()
    err, took = fails(ServerClient(f"http://127.0.0.1:{port}", deadline_s=1.0), "/slots")
    assert took < CEILING_S and "cannot reach" in str(err) and not err.reached


@pytest.mark.parametrize("path", ["/health", "/props"])
def test_json_nested_100000_deep_is_one_line_not_a_recursion_error(path):
    with FakeServer(llama_routes(**{path: Reply(nested(100_000))})) as url:
        with pytest.raises(ServerError) as info:
            read_server_info(ServerClient(url, deadline_s=2.0), wait_s=0)
    assert f"{path} answered JSON nested more than 64 deep: refused" in str(info.value)


def test_the_depth_check_counts_brackets_outside_strings_only():
    assert json_depth(b'{"a": [1, {"b": "[[[[ \\" ]]"}]}') == 3
    assert json_depth(nested(65)) == 65
    with pytest.raises(TooDeep):
        loads_bounded(nested(65))
    assert loads_bounded(b'["' + b"[" * 100 + b'"]') == ["[" * 100]  # brackets in a string do not nest


def test_a_body_over_the_bound_is_too_large_not_unreachable():
    huge = Reply(b"[" + b"0," * (MAX_JSON_BYTES // 2) + b"0]")
    with FakeServer(llama_routes(**{"/slots": huge})) as url:
        err, _ = fails(ServerClient(url, deadline_s=5.0), "/slots")
    assert str(err) == f"/slots answered more than {MAX_JSON_BYTES // 2**20} MiB: too large to read"
    assert err.reached and "unreachable" not in str(err)


def test_a_redirect_is_named_and_not_followed():
    routes = llama_routes(**{"/props": Reply(b"", 301, headers={"Location": "http://127.0.0.1:9/props"})})
    with FakeServer(routes) as url:
        err, _ = fails(ServerClient(url, deadline_s=1.0), "/props")
    assert err.status == 301 and "does not follow redirects" in str(err)


def test_polls_reuse_one_connection_and_survive_the_server_closing_it():
    with FakeServer() as url:
        client = ServerClient(url, deadline_s=1.0)
        assert client.get_json("/health") == {"status": "ok"}
        (conn,) = client._idle
        conn.sock.shutdown(2)  # what a server does to an idle connection: the next request must not fail
        assert client.get_json("/props")["total_slots"] == 2
        assert client.get_json("/health") == {"status": "ok"}
        client.close()


def test_hostile_props_are_refused_in_one_line():
    for bad, says in [({"n_ctx": 1e15}, "n_ctx 1,000,000,000,000,000 is more than any machine holds"),
                      ({"n_ctx": -4096}, "n_ctx -4,096 is below 1"),
                      ({"n_ctx": float("nan")}, "n_ctx is NaN")]:
        p = props()
        p["default_generation_settings"].update(bad)
        with FakeServer(llama_routes(**{"/props": json_reply(p)})) as url:
            with pytest.raises(ServerError) as info:
                read_server_info(ServerClient(url, deadline_s=2.0), wait_s=0)
        assert str(info.value) == f"/props refused: {says}"
