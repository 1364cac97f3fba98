"""kvtop's server engine and monitor against a real llama-server (built from the llama.cpp
that the pinned llama-cpp-python vendors), on the demo model, on a loopback port."""

import subprocess
import sys
import threading
import time

import pytest
from helpers import cores
from llama_server import get_json, healthy, llama_server, post_json

from kvtop.runner import events as ev
from kvtop.runner.process.blocking import BlockingEngine
from kvtop.runner.process.contract import EngineUnavailable
from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.monitor import ServerMonitor
from kvtop.runner.settings import Settings

LONG = "The tide comes in and the tide goes out, and the gulls count the waves. " * 120  # ~2,000 tokens


def engine(url, model, **kw):
    e = BlockingEngine(ServerEngine(Settings(model, temp=0, n_predict=kw.pop("n_predict", 16), **kw), url))
    e.start()
    return e


def test_a_chat_turn_is_measured_by_the_server(served, smollm_path):
    url, _ = served
    e = engine(url, smollm_path, n_predict=24)
    try:
        assert e.loaded.server == url and e.loaded.n_ctx == 4096 and e.loaded.total_slots == 2
        assert e.loaded.build_info and e.loaded.n_params > 100e6
        seen = []
        done = e.chat([{"role": "user", "content": LONG + "\nSummarise in one line."}], seen.append)
        assert isinstance(done, ev.TurnDone) and done.text.strip()
        m = done.metrics
        progress = [x for x in seen if isinstance(x, ev.PrefillProgress)]
        assert len(progress) >= 3  # the bar moves: one event per server batch of a ~2,000-token prompt
        assert progress[-1].done == progress[-1].total == m.prompt_tokens > 1500
        assert all(b.done >= a.done for a, b in zip(progress, progress[1:]))
        tokens = [x for x in seen if isinstance(x, ev.TokenEvent)]
        assert "".join(t.text for t in tokens) == done.text
        # the server counts every token it generated; a last end-of-turn token has no text
        assert m.decode_tokens in (len(tokens), len(tokens) + 1) and m.decode_tok_s and m.prefill_tok_s
        assert m.prefill_tokens + m.reused_tokens == m.prompt_tokens
        # the waterfall: network/queue, server prefill, first token; adds up to TTFT
        assert [s[0] for s in m.timeline] == ["network + server queue", "prefill (server-measured)",
                                              "first token + network"]
        assert sum(s[2] for s in m.timeline) == pytest.approx(m.ttft_s, abs=1e-6)
        assert m.timeline[1][2] == pytest.approx(m.prefill_s, rel=0.01, abs=0.005)
        # a follow-up reuses the server's cached prefix (cache_n)
        msgs = [{"role": "user", "content": LONG + "\nSummarise in one line."},
                {"role": "assistant", "content": done.text}, {"role": "user", "content": "Shorter."}]
        again = e.chat(msgs)
        assert again.metrics.reused_tokens > 1500
        assert again.metrics.prefill_tokens < 200
    finally:
        e.close()


def test_a_draft_is_measured_by_the_servers_own_template_and_tokenizer(served, smollm_path):
    """The forecast before Enter: /apply-template then /tokenize, the count a chat request
    prefills (the slot's cache is the server's to know: None, not 0)."""
    from kvtop.runner.process.commands import ChatMessage, MeasurePrompt

    url, _ = served
    client = ServerEngine(Settings(smollm_path), url)
    got = []
    reader = threading.Thread(target=client.pump, args=(got.append,), daemon=True)
    reader.start()
    client.start()
    client.submit(MeasurePrompt(7, (ChatMessage("user", "How high are the tides in the Bay of Fundy?"),)))
    deadline = time.monotonic() + 60
    while not any(isinstance(e, ev.PromptMeasured) for e in got):
        assert time.monotonic() < deadline, got
        time.sleep(0.05)
    client.close()
    (m,) = [e for e in got if isinstance(e, ev.PromptMeasured)]
    chat = post_json(url + "/apply-template", {"messages": [{"role": "user",
                                                             "content": "How high are the tides in the Bay of Fundy?"}]})
    expected = len(post_json(url + "/tokenize", {"content": chat["prompt"], "add_special": True})["tokens"])
    assert m.request_id == 7 and m.prompt_tokens == expected > 20 and m.cached_tokens is None and m.n_ctx == 4096


def slot_busy(url) -> bool:
    return any(s["is_processing"] for s in get_json(url + "/slots"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_cancel_closes_the_stream_and_the_server_slot_goes_idle(served, smollm_path, phase):
    url, _ = served
    e = engine(url, smollm_path, n_predict=2000, ignore_eos=True)
    try:
        def cancel_when(x):
            if phase == "prefill" and isinstance(x, ev.PrefillProgress) and x.done < x.total:
                e.cancel()
            if phase == "decode" and isinstance(x, ev.TokenEvent) and x.index == 5:
                e.cancel()

        prompt = LONG if phase == "prefill" else "Count to ten thousand."
        done = e.chat([{"role": "user", "content": prompt}], cancel_when)
        assert done.stop_reason == "cancelled"
        # the server notices the closed stream when it next sends: after the prompt batch it
        # is computing (up to -b 2,048 tokens), long before 2,000 tokens would be generated
        deadline = time.monotonic() + 60
        while slot_busy(url):
            assert time.monotonic() < deadline, "the server kept working on a cancelled turn"
            time.sleep(0.1)
        # a short follow-up (this engine's settings generate 2,000 tokens: on a loaded 2-core
        # machine that alone outlasted the test's timeout, which read as a hang)
        assert e.chat([{"role": "user", "content": "Hi"}], n_predict=8).stop_reason in ("eog", "n_predict")
    finally:
        e.close()


def test_another_clients_request_shows_in_the_slots_and_a_queue_shows_as_deferred(llama_server_bin, smollm_path,
                                                                                   tmp_path):
    with llama_server(llama_server_bin, smollm_path, slots=1, log_dir=str(tmp_path)) as (url, _):
        mon = ServerMonitor(ServerClient(url))
        first = mon.poll()
        assert first.reachable and len(first.slots) == 1 and first.busy == 0

        def other_client():
            post_json(url + "/completion", {"prompt": LONG, "n_predict": 64}, timeout=600)

        threads = [threading.Thread(target=other_client) for _ in range(2)]
        for t in threads:
            t.start()
        seen_busy = seen_deferred = seen_live_gen = False
        deadline = time.monotonic() + 300  # a ceiling: a busy machine prefills 2,000 tokens slowly
        while time.monotonic() < deadline and not (seen_busy and seen_deferred and seen_live_gen):
            s = mon.poll()
            seen_busy |= s.busy == 1 and s.slots[0].n_prompt_tokens > 0
            seen_deferred |= bool(s.rates and s.rates.requests_deferred)
            # the first reply is being made: the server's counter has none of it yet, the rate has
            seen_live_gen |= bool(s.busy and s.rates and s.rates.gen_tok_s and s.rates.gen_tokens_total == 0)
            time.sleep(0.2)
        for t in threads:
            t.join()
        assert seen_busy and seen_deferred and seen_live_gen
        s = mon.poll()
        assert s.rates.interval_s > 0 and s.model == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_server_without_slots_and_metrics_says_so(llama_server_bin, smollm_path, tmp_path):
    from llama_server import free_port

    port = free_port()
    proc = subprocess.Popen([llama_server_bin, "-m", smollm_path, "--host", "127.0.0.1", "--port", str(port),
                             "-c", "1024", "-t", str(cores()), "--no-slots"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if healthy(url):
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        s = ServerMonitor(ServerClient(url)).poll()
        assert s.reachable and s.slots == ()
        assert "--slots" in s.slots_note and "--metrics" in s.metrics_note
        e = engine(url, smollm_path)  # chatting still works
        try:
            assert e.chat([{"role": "user", "content": "Hi"}]).metrics.decode_tokens > 0
        finally:
            e.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_wrong_api_key_is_named(llama_server_bin, smollm_path, tmp_path):
    with llama_server(llama_server_bin, smollm_path, "--api-key", "sesame", log_dir=str(tmp_path)) as (url, _):
        with pytest.raises(EngineUnavailable, match="401"):
            engine(url, smollm_path)
        with pytest.raises(EngineUnavailable, match="401"):
            BlockingEngine(ServerEngine(Settings(smollm_path), url, api_key="wrong")).start()
        e = BlockingEngine(ServerEngine(Settings(smollm_path, n_predict=4), url, api_key="sesame"))
        e.start()
        e.close()


def test_the_server_killed_mid_stream_ends_the_turn_with_a_reason(llama_server_bin, smollm_path, tmp_path):
    with llama_server(llama_server_bin, smollm_path, log_dir=str(tmp_path)) as (url, proc):
        e = engine(url, smollm_path, n_predict=5000, ignore_eos=True)

        def kill_at_token_3(x):
            if isinstance(x, ev.TokenEvent) and x.index == 3:
                proc.kill()

        with pytest.raises(EngineUnavailable, match="turn ended"):
            e.chat([{"role": "user", "content": "Count to ten thousand."}], kill_at_token_3)
        proc.wait()
        s = ServerMonitor(ServerClient(url)).poll()
        assert not s.reachable and "cannot reach" in s.error
        e.close()


def test_kvtop_server_exits_1_with_one_line_when_nothing_listens(tmp_path):
    from llama_server import free_port

    out = subprocess.run([sys.executable, "-m", "kvtop", "--server", f"127.0.0.1:{free_port()}"],
                         capture_output=True, text=True, timeout=30, env={"KVTOP_HOME": str(tmp_path),
                                                                        "PATH": "/usr/bin:/bin"})
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach" in lines[0] and "llama-server" in lines[0]


def test_a_url_that_is_not_llama_server_is_named(tmp_path):
    import http.server

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(EngineUnavailable, match="llama-server"):
            BlockingEngine(ServerEngine(Settings("x"), f"http://127.0.0.1:{srv.server_port}")).start()
    finally:
        srv.shutdown()


def kvtop_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=timeout)


def test_kvtop_bench_through_the_server_gives_the_local_fields(served, smollm_path):
    import json

    url, _ = served
    out = kvtop_cli("bench", "--server", url, "-p", "128", "-n", "16", "-r", "2", "--json")
    assert out.returncode == 0, out.stderr
    pp, tg = json.loads(out.stdout)
    local = json.loads(kvtop_cli("bench", smollm_path, "-p", "8", "-n", "0", "-r", "1", "--json").stdout)[0]
    assert list(pp) == list(tg) == list(local)  # llama-bench's fields, then kvtop's, as a local bench
    assert pp["kvtop_process"] == "server" and pp["kvtop_server"] == url and pp["model_filename"] == smollm_path
    assert (pp["n_prompt"], pp["n_gen"], tg["n_prompt"], tg["n_gen"]) == (128, 0, 0, 16)
    # measured, not how fast: a busy machine's server prefills at 10 tok/s
    assert len(pp["samples_ts"]) == 2 and pp["avg_ts"] > 0 and tg["avg_ts"] > 0
    assert pp["n_threads"] is None and pp["backends"] == "?"  # the server's, not published: unknown rather than 0
    assert pp["model_type"] == "llama Q4_1" and pp["build_number"] > 0
    table = kvtop_cli("bench", "--server", url, "-p", "64", "-n", "8", "-r", "1")
    cells = " ".join(table.stdout.split())
    assert table.returncode == 0 and "| pp64 |" in cells and "| tg8 |" in cells and "| ? |" in cells
    refused = kvtop_cli("bench", "--server", url, "-p", "64", "-t", "2")
    assert refused.returncode == 2 and "-t cannot change on a running llama-server" in refused.stderr


def test_kvtop_estimate_for_a_server_counts_every_slot(served, smollm_path):
    import json

    url, _ = served
    out = kvtop_cli("estimate", "--server", url, "--prompt-tokens", "1024", "--bandwidth-gbs", "30",
                    "--tflops", "0.2", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    s = r["server"]
    # n_ctx, the KV and the memory check are the whole server's (every slot is allocated),
    # the batched ceiling each slot's (a new user saw "KV 0.18" beside "KV, all slots 720")
    assert s["total_slots"] == 2 and s["n_ctx_per_slot"] == 4096 and r["n_ctx"] == 2 * 4096
    assert s["kv_bytes_all_slots"] == r["kv_bytes"]
    assert f"KV {r['kv_bytes'] / 2**30:.2f}" in r["memory_message"]
    # two slots decoding at depth 1,024 share one read of the weights: 2 x bw / (weights + 2 x KV)
    kv_1024 = 1024 * r["kv_bytes_per_token"]
    want = 2 * 30e9 / (r["weights_bytes_active"] + 2 * kv_1024)
    assert s["batched_ceiling_tok_s"] == pytest.approx(want, rel=0.01)
    assert s["per_slot_ceiling_tok_s"] == pytest.approx(want / 2, rel=0.01) and s["batched_bound"] == "bandwidth"
