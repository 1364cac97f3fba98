"""vLLM's own prefill time for one bench request (runner/server/vllm_timing.py): the growth
of its request_prefill_time_seconds histogram between two /metrics reads, on the recorded
samples of a real vLLM 0.32 (tests/data/vllm/), served by a fake server."""

from __future__ import annotations

import os

import pytest
from fake_servers import FakeServer, Reply

from kvtop.runner.events import TurnDone
from kvtop.runner.process.commands import Generate
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.openai_request import openai_request
from kvtop.runner.server.stream import TurnTranslator
from kvtop.runner.server.vllm_timing import prefill_counts, prefill_ms_since
from kvtop.runner.settings import Settings

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data", "vllm")


def metrics(name: str) -> Reply:
    with open(os.path.join(DATA, f"vllm-metrics-{name}.txt"), "rb") as fh:
        return Reply(fh.read(), content_type="text/plain")


def test_one_request_between_two_reads_is_its_prefill_time():
    routes = {"/metrics": metrics("idle")}
    with FakeServer(routes) as url:
        client = ServerClient(url)
        before = prefill_counts(client)
        assert before == (0.0, 0.0)
        text = routes["/metrics"].body.replace(b'request_prefill_time_seconds_count{engine="0",model_name="smollm2"} 0.0',
                                               b'request_prefill_time_seconds_count{engine="0",model_name="smollm2"} 1.0')
        text = text.replace(b'request_prefill_time_seconds_sum{engine="0",model_name="smollm2"} 0.0',
                            b'request_prefill_time_seconds_sum{engine="0",model_name="smollm2"} 0.125')
        routes["/metrics"] = Reply(text, content_type="text/plain")
        assert prefill_ms_since(client, before) == pytest.approx(125.0)
        routes["/metrics"] = metrics("during-4streams")  # 8 requests since: whose prefill is not known
        assert prefill_ms_since(client, before) is None
        routes["/metrics"] = metrics("idle")  # none finished (yet): read again, then unknown
        assert prefill_ms_since(client, before, wait_s=0.1) is None
        routes["/metrics"] = Reply(b"# no vLLM here\n", content_type="text/plain")
        assert prefill_counts(client) is None and prefill_ms_since(client, None) is None


def test_a_bench_request_gets_its_own_cache_salt_and_its_prefill_time():
    s = Settings("m", n_ctx=2048)
    path, a = openai_request(s, Generate(1, (1, 2, 3), 0.0, 4))
    _, b = openai_request(s, Generate(2, (1, 2, 3), 0.0, 4))
    assert path == "/v1/completions" and a["cache_salt"] != b["cache_salt"]  # no block of another's cache
    events: list = []
    tr = TurnTranslator(1, 0.0, 2048, events.append)
    tr.usage = {"prompt_tokens": 32, "completion_tokens": 2}
    tr.server_prefill_ms = 40.0
    done = tr.done(1.0)
    assert isinstance(done, TurnDone) and done.metrics.prefill_tokens == 32
    assert done.metrics.prefill_s == pytest.approx(0.04) and done.metrics.prefill_tok_s == pytest.approx(800)
