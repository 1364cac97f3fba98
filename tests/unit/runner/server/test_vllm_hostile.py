"""The hostile cases of attach mode against a fake vLLM (real sockets on 127.0.0.1, the
recorded answers of a real vLLM with one fault each): a trickling or hanging /metrics, JSON
nested 100,000 deep, a huge /metrics, hostile numbers, a secret in the URL, a restart. Each
ends in a bounded time with one line or a refused figure, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import time

import pytest
from fake_servers import FakeServer, Reply, nested

from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.server.identity import RestartWatch
from kvtop.runner.server.monitor import ServerMonitor
from kvtop.runner.server.props import read_server_info
from kvtop.runner.server.vllm_info import restart_props

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data", "vllm")


def sample(name: str) -> bytes:
    with open(os.path.join(DATA, name), "rb") as fh:
        return fh.read()


def vllm_routes(**over) -> dict:
    routes = {"/health": Reply(b""), "/version": Reply(sample("vllm-version.json")),
              "/v1/models": Reply(sample("vllm-models.json")),
              "/metrics": Reply(sample("vllm-metrics-idle.txt"), content_type="text/plain")}
    routes.update(over)
    return routes


def poll_twice(url: str, deadline_s: float = 1.0):
    mon = ServerMonitor(ServerClient(url, deadline_s=deadline_s))
    mon.poll()
    return mon, mon.poll()


@pytest.mark.parametrize("fault", [Reply(hang=True), Reply(sample("vllm-metrics-idle.txt"), trickle_s=0.5)],
                         ids=["hang", "trickle"])
def test_a_metrics_that_hangs_or_trickles_ends_by_the_deadline(fault):
    srv = FakeServer(vllm_routes())
    with srv as url:
        mon = ServerMonitor(ServerClient(url, deadline_s=1.0))
        assert mon.poll().batch is not None  # a vLLM, seen once
        srv.routes["/metrics"] = fault
        t0 = time.monotonic()
        snap = mon.poll()
        assert time.monotonic() - t0 < 3.0
    assert snap.batch is None and (snap.error or snap.metrics_note)  # said, not hung


def test_json_nested_100000_deep_is_refused_in_one_line():
    with FakeServer(vllm_routes(**{"/version": Reply(nested(100_000)), "/v1/models": Reply(nested(100_000))})) as url:
        with pytest.raises(ServerError) as exc:
            read_server_info(ServerClient(url, deadline_s=2.0), wait_s=0)
    assert "\n" not in str(exc.value)


def test_a_huge_metrics_is_read_only_as_far_as_its_bounds():
    junk = b"".join(b"vllm:junk_total{i=\"%d\"} 1\n" % i for i in range(200_000))
    with FakeServer(vllm_routes(**{"/metrics": Reply(sample("vllm-metrics-idle.txt") + junk,
                                                      content_type="text/plain")})) as url:
        t0 = time.monotonic()
        _, snap = poll_twice(url, deadline_s=5.0)
        assert time.monotonic() - t0 < 5.0
    assert snap.batch is not None and snap.batch.running == 0


def test_hostile_numbers_are_unknown_never_drawn():
    text = sample("vllm-metrics-during-4streams.txt").decode()
    text = text.replace('vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 0.011019283746556474',
                        'vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 7.5')
    text = text.replace('vllm:num_requests_running{engine="0",model_name="smollm2"} 4.0',
                        'vllm:num_requests_running{engine="0",model_name="smollm2"} -4')
    text = text.replace('vllm:generation_tokens_total{engine="0",model_name="smollm2"} 436.0',
                        'vllm:generation_tokens_total{engine="0",model_name="smollm2"} NaN')
    text = text.replace('num_gpu_blocks="364"', 'num_gpu_blocks="-1e99"')
    with FakeServer(vllm_routes(**{"/metrics": Reply(text.encode(), content_type="text/plain")})) as url:
        _, snap = poll_twice(url)
    b = snap.batch
    assert b is not None and b.kv_usage is None and b.running is None and b.kv_tokens is None
    assert snap.rates is not None and snap.rates.gen_tokens_total is None


def test_a_secret_in_the_url_never_reaches_a_line():
    from kvtop.runner.server.credentials import Credentials

    key = Credentials("sk-secret")
    with FakeServer({"/health": Reply(b""), "/v1/models": Reply(json.dumps(
            {"data": [{"id": "x", "owned_by": "proxy"}]}).encode())}) as url:
        login = url.replace("http://", "http://user:hunter2@")
        bare = key.add(login)
        with pytest.raises(ServerError) as exc:
            read_server_info(ServerClient(bare, key), wait_s=0)
    assert "hunter2" not in str(exc.value) and "sk-secret" not in str(exc.value)


def test_a_restart_is_seen_and_named_vllm():
    srv = FakeServer(vllm_routes(**{"/metrics": Reply(sample("vllm-metrics-after-prefix-hit.txt"),
                                                       content_type="text/plain")}))
    with srv as url:
        mon = ServerMonitor(ServerClient(url))
        watch = RestartWatch(lambda: restart_props(mon.client, mon.batching is not None))
        assert watch.observe(mon.poll()) is None
        assert watch.identity is not None and watch.identity.engine == "vLLM"
        assert watch.identity.n_ctx == 2048 and watch.identity.build_info == "vLLM 0.32.0"
        assert watch.observe(mon.poll()) is None  # the same process polled again
        # another process on the URL: its counters start from zero
        srv.routes["/metrics"] = Reply(sample("vllm-metrics-idle.txt"), content_type="text/plain")
        restart = watch.observe(mon.poll())
    assert restart is not None and restart.line().startswith("vLLM restarted: ")
