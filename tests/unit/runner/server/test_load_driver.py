"""kvtop load's driver against a stand-in server on loopback (tests/fake_llama_server.py):
prompts of exactly -p tokens, a different one per request (or a shared prefix when
asked), every user's requests made, and a stop that ends the streams in flight at once
(the server sees each client go). The real llama-server runs in tests/e2e."""

from __future__ import annotations

import threading
import time

from fake_llama_server import FakeLlamaServer

from kvtop.runner.server.load_driver import LoadDriver


def test_each_request_sends_exactly_p_tokens_and_no_two_are_alike():
    with FakeLlamaServer() as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=48)
        run = d.closed_loop(3, 5, 2, None, ("level", 0))
    assert len(run.results) == 6 and all(r.ok for r in run.results)
    assert [len(p) for p in srv.state.prompts] == [48] * 6
    assert len({tuple(p) for p in srv.state.prompts}) == 6
    assert all(r.tokens == 5 and len(r.chunks) == 5 and r.predicted_n == 5 for r in run.results)
    assert run.watch.generated(0) == 30  # the server's counter over the level
    assert all(r.ttft_s is not None and 0 < r.ttft_s <= r.e2e_s for r in run.results)


def test_a_shared_prefix_is_the_same_in_every_request_and_the_rest_differs():
    with FakeLlamaServer() as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=40, shared_prefix=30)
        d.closed_loop(2, 2, 2, None, ("level", 0))
    heads = {tuple(p[:30]) for p in srv.state.prompts}
    tails = {tuple(p[30:]) for p in srv.state.prompts}
    assert len(heads) == 1 and len(tails) == 4


def test_the_warm_up_is_not_measured():
    with FakeLlamaServer() as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=16)
        d.warm_up(2)
        run = d.closed_loop(1, 3, 1, None, ("level", 0))
    assert len(srv.state.prompts) == 3 and len(run.results) == 1


def test_stop_ends_every_stream_in_flight_and_sends_no_more():
    with FakeLlamaServer(token_s=0.05) as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=16)
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("run", d.closed_loop(3, 400, 5, None, ("l", 0))))
        t.start()
        deadline = time.monotonic() + 10
        while srv.state.busy < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.state.busy == 3
        t0 = time.monotonic()
        d.stop()
        t.join(10)
        stopped_in = time.monotonic() - t0
        # the product target is at once; 3 s is the ceiling for a shared 2-core machine
        assert not t.is_alive() and stopped_in < 3.0
        assert d.wait_idle(5.0)
        run = out["run"]
        assert run.stopped and len(run.results) == 3 and all(r.cancelled and not r.ok for r in run.results)
        assert all(r.error is None for r in run.results)  # a cancel is not a failure
        assert len(srv.state.prompts) == 3  # no request after the stop
        deadline = time.monotonic() + 5
        while srv.state.disconnects < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.state.disconnects == 3


def test_poisson_arrivals_send_the_requests_asked_for():
    with FakeLlamaServer() as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=8)
        run = d.open_loop(50.0, 2, 6, None, ("rate", 0))
    assert run.rate == 50.0 and run.users is None
    assert len(run.results) == 6 and all(r.ok for r in run.results)


def test_a_fleet_spreads_users_over_the_servers():
    with FakeLlamaServer() as a, FakeLlamaServer() as b:
        d = LoadDriver([a.url, b.url], None, prompt_tokens=8)
        run = d.closed_loop(3, 2, 1, None, ("level", 0))
    assert len(a.state.prompts) == 2 and len(b.state.prompts) == 1
    assert sorted(r.server for r in run.results) == [0, 0, 1]


def test_the_chat_endpoint_sends_the_text_of_the_same_ids():
    with FakeLlamaServer() as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=12, endpoint="chat")
        run = d.closed_loop(2, 3, 1, None, ("level", 0))
    assert [len(p) for p in srv.state.prompts] == [12, 12]  # the stand-in's detokenize: a word per id
    assert all(p[0].startswith("w") for p in srv.state.prompts)
    assert all(r.ok and r.tokens == 3 and len(r.chunks) == 3 for r in run.results)
