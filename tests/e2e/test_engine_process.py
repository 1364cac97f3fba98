"""The engine in its child process, on the real SmolLM2-135M model."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kvtop.runner import events as ev
from kvtop.runner.process.blocking import BlockingEngine
from kvtop.runner.process.contract import EngineUnavailable
from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings

LONG = "Here is a long document about the sea and its many colours. " * 120  # ~1,500 tokens


@pytest.fixture
def engine(smollm_path):
    e = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=24)))
    e.start(lambda x: None)
    yield e
    e.close()


def collect():
    seen = []
    return seen, seen.append


def test_two_turn_chat_reuses_the_prefix(engine):
    seen, on = collect()
    msgs = [{"role": "user", "content": "Name a colour."}]
    t1 = engine.chat(msgs, on)
    assert t1.stop_reason in ("eog", "n_predict") and t1.text.strip()
    assert t1.metrics.reused_tokens == 0 and t1.metrics.prefill_tokens == t1.metrics.prompt_tokens
    msgs += [{"role": "assistant", "content": t1.text}, {"role": "user", "content": "Another one?"}]
    t2 = engine.chat(msgs, on)
    m = t2.metrics
    assert m.reused_tokens > t1.metrics.prompt_tokens  # turn 1's prompt and most of its answer
    assert m.reused_tokens + m.prefill_tokens == m.prompt_tokens
    started = [e for e in seen if isinstance(e, ev.TurnStarted)]
    assert started[-1].reused_tokens == m.reused_tokens
    # the events add up: one per generated token, positions consecutive
    toks = [e for e in seen if isinstance(e, ev.TokenEvent) and e.turn_id == t2.turn_id and e.token_id >= 0]
    assert len(toks) == m.decode_tokens
    assert [e.pos for e in toks] == list(range(m.prompt_tokens, m.prompt_tokens + len(toks)))
    assert "".join(e.text for e in seen if isinstance(e, ev.TokenEvent) and e.turn_id == t2.turn_id) == t2.text
    # timings cross-checked against llama.cpp's own perf counters
    assert m.perf["n_p_eval"] == m.prefill_tokens
    assert m.perf["t_p_eval_ms"] / 1000 == pytest.approx(m.prefill_s, rel=0.2, abs=0.01)
    # every emitted token is in the cache, except the last one when -n stopped before evaluating it
    assert m.kv_cells_used == m.prompt_tokens + m.decode_tokens - (1 if t2.stop_reason == "n_predict" else 0)


def test_cancel_during_prefill_then_the_same_answer_as_a_fresh_engine(engine, smollm_path):
    seen, on = collect()
    threading.Timer(0.6, engine.cancel).start()
    t0 = time.monotonic()
    r = engine.chat([{"role": "user", "content": LONG}], on)
    assert r.stop_reason == "cancelled"
    assert time.monotonic() - t0 < 5  # a 1,500-token prefill takes longer: the cancel cut it short
    assert r.metrics.prefill_tokens < r.metrics.prompt_tokens
    assert r.metrics.decode_tokens == 0
    for _ in range(2):  # cancel again, repeatedly
        threading.Timer(0.3, engine.cancel).start()
        assert engine.chat([{"role": "user", "content": LONG}], on).stop_reason == "cancelled"
    question = [{"role": "user", "content": "What is 2 + 2?"}]
    after = engine.chat(question, on)
    assert after.stop_reason in ("eog", "n_predict") and after.text
    fresh = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=24)))
    fresh.start(lambda x: None)
    try:
        assert fresh.chat(question, lambda x: None).text == after.text
    finally:
        fresh.close()


def test_cancel_during_decode_twice_in_a_row(smollm_path):
    e = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=200)))
    e.start(lambda x: None)

    def cancel_at_token_3(x):
        if isinstance(x, ev.TokenEvent) and x.index == 3:
            e.cancel()

    story = [{"role": "user", "content": "Tell me a long story."}]
    try:
        first = e.chat(story, cancel_at_token_3)
        assert first.stop_reason == "cancelled" and 4 <= first.metrics.decode_tokens < 200
        r = e.chat(story, cancel_at_token_3)
        assert r.stop_reason == "cancelled" and 4 <= r.metrics.decode_tokens < 200
        assert r.metrics.reused_tokens > 0
    finally:
        e.close()


def test_prompt_longer_than_the_context_is_refused_with_counts(smollm_path):
    e = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=256, temp=0, n_predict=8)))
    e.start(lambda x: None)
    try:
        r = e.chat([{"role": "user", "content": LONG}], lambda x: None)
        assert isinstance(r, ev.TurnRefused)
        assert r.n_ctx == 256 and r.prompt_tokens > 256
        assert f"prompt is {r.prompt_tokens:,} tokens" in r.reason and "holds 256" in r.reason
        ok = e.chat([{"role": "user", "content": "Hi"}], lambda x: None)  # still usable
        assert isinstance(ok, ev.TurnDone)
    finally:
        e.close()


def test_generation_that_fills_the_context_stops_with_context_full(smollm_path):
    e = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=256, temp=0, n_predict=-1)))
    e.start(lambda x: None)
    try:
        prompt = "Count from one to one thousand, one number per line, never stop: one, two, three,"
        toks = e.tokenize(prompt)
        r = e.generate(toks, lambda x: None, n_predict=-1, ignore_eog=True)
        assert r.stop_reason == "context_full"
        assert r.metrics.kv_cells_used == 255 and r.metrics.n_ctx == 256
        assert r.metrics.prompt_tokens + r.metrics.decode_tokens == 256
        r2 = e.chat([{"role": "user", "content": "Hi"}], lambda x: None)
        assert isinstance(r2, ev.TurnDone)  # the next turn trims the cache and runs
    finally:
        e.close()


def test_multibyte_characters_split_across_tokens(smollm_path):
    from kvtop.runner.engine.engine import Engine
    from kvtop.runner.engine.utf8_stream import Utf8Stream

    e = Engine(Settings(smollm_path, n_ctx=256), lambda x: None)
    e.load()
    try:
        text = "日本語 🎉 é́ naïve"
        toks = e.tokenize(text, add_special=False)
        pieces = [e.piece(t) for t in toks]
        assert any(_incomplete(p) for p in pieces), "the test needs a token that splits a character"
        s = Utf8Stream()
        out = [s.feed(p) for p in pieces] + [s.flush()]
        assert "".join(out) == text
        assert all("\ufffd" not in d for d in out)
        # a stream cut mid-character (cancel) flushes U+FFFD, never drops bytes silently
        s2 = Utf8Stream()
        cut = "🎉".encode()[:2]
        assert s2.feed(cut) == "" and s2.flush() == "\ufffd"
        assert Utf8Stream().feed(b"ok \xff\xfe end") == "ok \ufffd\ufffd end"
    finally:
        e.close()


def _incomplete(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_engine_death_is_reported_and_the_parent_lives(smollm_path):
    e = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=2048, temp=0, n_predict=-1)))
    e.start(lambda x: None)
    seen = []

    def on(ev_):
        seen.append(ev_)
        if isinstance(ev_, ev.TokenEvent) and ev_.index == 2:
            os.kill(e.pid, signal.SIGABRT)  # what a GGML_ASSERT does

    with pytest.raises(EngineUnavailable, match="SIGABRT"):
        e.chat([{"role": "user", "content": "Tell me a story."}], on)
    assert isinstance(seen[-1], ev.EngineDied) and seen[-1].exitcode == -signal.SIGABRT
    assert not e.alive()
    e.close()


def test_bench_json(smollm_path):
    out = subprocess.run([sys.executable, "-m", "kvtop", "bench", smollm_path, "-p", "64", "-n", "16", "-r", "2",
                          "-c", "512", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    pp, tg = json.loads(out.stdout)  # llama-bench's rows: pp64, then tg16 from an empty context
    assert (pp["n_prompt"], pp["n_gen"], tg["n_prompt"], tg["n_gen"]) == (64, 0, 0, 16)
    for r in (pp, tg):
        assert r["model_filename"] == smollm_path and r["n_threads"] >= 1 and r["avg_ts"] > 0
        assert len(r["samples_ts"]) == 2 and r["kvtop_n_ctx"] == 512
        assert r["kvtop_kv_bytes_allocated"] == 512 * 22.5 * 1024  # 30 layers x 3 KV heads x 64 x 2 x 2 bytes per cell
    assert pp["kvtop_ttft_s"] > 0 and tg["kvtop_ttft_s"] is None


def test_bench_usage_and_runtime_errors(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 4)
    r = subprocess.run([sys.executable, "-m", "kvtop", "bench", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "truncated" in r.stderr and str(bad) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([sys.executable, "-m", "kvtop", "bench", str(bad), "--server", "http://127.0.0.1:9"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "one of them" in r.stderr  # a MODEL and a server: a usage error
    # no MODEL: the demo model, as kvtop itself (a new user looked for its path)
    r = subprocess.run([sys.executable, "-m", "kvtop", "bench", "-p", "16", "-n", "4", "-r", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("| model ") and "| llama 256M Q4_1 " in r.stdout, r.stderr
    assert "| tg4 |" in " ".join(r.stdout.split()) and "@ d" not in r.stdout  # from an empty context, as llama-bench


def test_n_ctx_is_padded_so_no_prompt_lands_in_llama_cpps_padding(smollm_path):
    """-c 300 becomes 512 (llama.cpp pads to 256); a 400-token prompt then fits and runs."""
    from kvtop.runner.engine.engine import Engine

    e = Engine(Settings(smollm_path, n_ctx=300, temp=0, n_predict=2), lambda x: None)
    loaded = e.load()
    try:
        assert e.settings.n_ctx == 512 and loaded.n_ctx == 512
        toks = (e.tokenize("The cat sat on the mat. ") * 60)[:400]
        done = e.generate(toks, n_predict=2, ignore_eog=True)
        assert done.stop_reason == "n_predict" and done.metrics.prompt_tokens == 400
    finally:
        e.close()


def test_cpu_probe_is_sane_and_its_ceiling_is_above_measured_decode(smollm_path, tmp_path):
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.kv_bytes import kv_layout
    from kvtop.runner.physics.roofline import decode_ceilings_at
    from kvtop.runner.system.hardware import cpu_profile

    probe = cpu_profile(str(tmp_path), refresh=True)
    # how long it took is no test's business (~3 s quiet here, 22 s on a busy machine):
    # what it measured is. The batch curve never slows with size, its top is the peak.
    curve = [probe.tflops_at(n) for n in (1, 4, 16, 64, 128, 512)]
    assert curve == sorted(curve) and 0 < curve[0] and curve[-1] <= probe.tflops * 1.0001
    assert 1 < probe.bandwidth_gbs < 2000 and 0.005 < probe.tflops < 500
    if not probe.disturbed:  # a probe taken on a busy machine is taken again (tests/unit/runner/system)
        assert cpu_profile(str(tmp_path)) == probe  # cached on disk per machine
    e = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=1024, temp=0, n_predict=64)))
    e.start(lambda x: None)
    try:
        done = e.generate(e.tokenize("Once upon a time"), lambda x: None, n_predict=64, ignore_eog=True)
    finally:
        e.close()
    facts = load_facts(smollm_path)
    bw, comp = decode_ceilings_at(facts, kv_layout(facts, 1024), probe.bandwidth_gbs, probe.tflops,
                                  done.metrics.kv_cells_used)
    assert done.metrics.decode_tok_s < bw


def test_the_probe_leaves_no_huge_pages_behind(monkeypatch):
    """The probe runs just before the model loads: its freed huge pages made the
    kernel compact memory during the first turn (decode 2% slower, measured)."""
    import json as _json
    import subprocess

    from kvtop.runner.system import hardware

    seen = {}

    def fake_run(cmd, **kw):
        seen.update(kw["env"])
        out = {"bandwidth_gbs": 30.0, "tflops": 0.2, "threads": 2, "seconds": 0.3, "measured_at": 0.0,
               "machine": "m"}
        return subprocess.CompletedProcess(cmd, 0, _json.dumps(out) + "\n", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    probe = hardware.probe_cpu_in_subprocess()
    assert probe.bandwidth_gbs == 30.0
    assert seen.get("NUMPY_MADVISE_HUGEPAGE") == "0"


def test_a_turn_runs_on_the_threads_it_is_given_then_on_the_engines_again(smollm_path):
    """On a busy machine kvtop runs a turn on the cores other processes leave free
    (runner.calibration.load.turn_threads): llama_set_n_threads for that turn only. The
    turn's metrics say the threads it ran on, and one thread cannot use more than one core."""
    import psutil

    e = BlockingEngine(EngineProcess(Settings(smollm_path, n_ctx=1024, n_threads=2, temp=0)))
    loaded = e.start(lambda x: None)
    try:
        child = psutil.Process(loaded.pid)
        prompt = e.tokenize(LONG)[:400]

        def turn(threads):
            e.reset()
            cpu0, t0 = sum(child.cpu_times()[:2]), time.monotonic()
            done = e.generate(prompt, n_predict=24, threads=threads)
            return done.metrics, (sum(child.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)

        one, cores_one = turn((1, 1))
        assert (one.n_threads, one.n_threads_batch) == (1, 1)
        assert cores_one < 1.15, f"one thread used {cores_one:.2f} cores"  # the pipe's thread is idle meanwhile
        again, _ = turn(None)
        assert (again.n_threads, again.n_threads_batch) == (2, 2)
        assert again.decode_tokens == one.decode_tokens == 24
    finally:
        e.close()
