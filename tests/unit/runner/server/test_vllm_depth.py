"""pp at depth on vLLM (runner/server/vllm_depth.py): the depth and the prompt after it
share one cache_salt, vLLM's prefix cache serves the depth, and ``-d`` is refused where it
cannot be measured, on the recorded /metrics of a real vLLM 0.32 (tests/data/vllm/)."""

from __future__ import annotations

import os

import pytest
from fake_servers import FakeServer, Reply

from kvtop.runner.events import TurnDone
from kvtop.runner.process.commands import Generate
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.openai_request import openai_request
from kvtop.runner.server.stream import TurnTranslator
from kvtop.runner.server.vllm_depth import LLAMA_SERVER, Salts, depth_refusal, prefix_hits
from kvtop.runner.settings import Settings

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data", "vllm")


def metrics(name: str) -> Reply:
    with open(os.path.join(DATA, f"vllm-metrics-{name}.txt"), "rb") as fh:
        return Reply(fh.read(), content_type="text/plain")


def test_a_depth_and_the_prompt_after_it_share_a_salt_and_nothing_else_does():
    salts = Salts()
    depth, prompt = tuple(range(128)), tuple(range(128 + 64))
    fill = salts.for_tokens(depth)
    assert salts.for_tokens(prompt) == fill  # continues the depth: its blocks come from the cache
    again = salts.for_tokens(depth)  # the next repetition's fill: a prefix, not a continuation
    assert again != fill
    assert salts.for_tokens(depth) != again  # the same tokens again compute whole (pp at d0, tg)
    assert salts.for_tokens((9, *prompt)) not in (fill, again)
    s = Settings("m", n_ctx=2048)
    _, body = openai_request(s, Generate(1, prompt, 0.0, 1), salt="abc")
    assert body["cache_salt"] == "abc"
    _, body = openai_request(s, Generate(2, prompt, 0.0, 1))
    assert body["cache_salt"] not in ("abc", None)


def test_the_prefix_cache_hits_are_read_and_make_the_prompt_computed_the_rest():
    routes = {"/metrics": metrics("idle")}
    with FakeServer(routes) as url:
        client = ServerClient(url)
        assert prefix_hits(client) == 0.0
        routes["/metrics"] = metrics("after-prefix-hit")
        assert prefix_hits(client) == 256.0
        routes["/metrics"] = Reply(b"# no vLLM here\n", content_type="text/plain")
        assert prefix_hits(client) is None
        client.close()
    events: list = []
    tr = TurnTranslator(1, 0.0, 2048, events.append)
    tr.usage = {"prompt_tokens": 128 + 64, "completion_tokens": 1}  # no prompt_tokens_details by default
    tr.server_prefill_ms, tr.server_cached = 50.0, 128.0
    done = tr.done(1.0)
    assert isinstance(done, TurnDone) and done.metrics.prefill_tokens == 64  # P, computed after the depth
    assert done.metrics.prefill_tok_s == pytest.approx(64 / 0.05)


def test_depth_is_refused_on_llama_server_and_off_vllms_blocks():
    with FakeServer({"/metrics": metrics("idle")}) as url:
        assert depth_refusal(url, None, [0, 128, 256]) is None
        why = depth_refusal(url, None, [128, 100])
        assert why is not None and "-d 100" in why and "blocks of 128 tokens" in why and "multiples of 128" in why
    with FakeServer({"/metrics": Reply(b"llamacpp:prompt_tokens_total 0\n", content_type="text/plain")}) as url:
        assert depth_refusal(url, None, [128]) == LLAMA_SERVER
    with FakeServer({}) as url:  # no /metrics at all (404): not a vLLM
        assert depth_refusal(url, None, [128]) == LLAMA_SERVER


def test_a_server_that_does_not_answer_is_refused_saying_why():
    with FakeServer({}) as url:
        pass  # closed: nothing listens there now
    why = depth_refusal(url, None, [128])
    assert why is not None and why.startswith(LLAMA_SERVER) and "did not answer" in why
