"""``kvtop bench``: what each test runs on the engine and what it times (on an engine
that keeps its KV cache exactly as kvtop's does, with fixed speeds), the server's
refusals, -p 0 / -n 0, and the model check before the engine starts."""

import json

import pytest
from gguf_factory import write_tiny_llama
from scripted_engine import smollm_loaded

from kvtop.runner import events as ev
from kvtop.runner.commands import bench
from kvtop.runner.commands.bench_plan import BenchTest
from kvtop.runner.engine.prompt_cache import common_prefix

PP, TG, FIRST = 1000.0, 100.0, 0.002  # the fake engine's prefill and decode tok/s, its first-token wait
BOS, BODY = 1, list(range(10, 30))


class FakeEngine:
    """BlockingEngine's calls on a KV cache that keeps the common prefix as kvtop's engine
    does (``common_prefix``: at least one prompt token computed); prefill takes 1 ms a
    token, each decode 10 ms."""

    opened: list = []

    def __init__(self, settings):
        self.settings = settings.resolved()
        self.kv: list[int] = []
        self.calls: list[tuple] = []
        FakeEngine.opened.append(self)

    def start(self, on_event=None):
        return smollm_loaded(self.settings.model, n_ctx=self.settings.n_ctx)

    def tokenize(self, text, add_special=True):
        return ([BOS] if add_special else []) + BODY

    def reset(self):
        self.calls.append(("reset",))
        self.kv = []

    def generate(self, tokens, on_event=None, n_predict=128, ignore_eog=True):
        reused = common_prefix(self.kv, tokens)
        computed = len(tokens) - reused
        self.calls.append(("generate", len(tokens), reused, n_predict))
        self.kv = list(tokens) + [999] * (n_predict - 1)  # every sampled token but the last is decoded
        prefill_s, decode_s = computed / PP, (n_predict - 1) / TG
        m = ev.TurnMetrics(
            prompt_tokens=len(tokens), reused_tokens=reused, prefill_tokens=computed, prefill_s=prefill_s,
            prefill_tok_s=computed / prefill_s, template_s=0.0, tokenize_s=0.0, wait_s=0.0,
            ttft_s=prefill_s + FIRST, decode_tokens=n_predict, decode_s=decode_s,
            decode_tok_s=(n_predict - 1) / decode_s if decode_s else None, itl_p50_ms=None, itl_p95_ms=None,
            kv_cells_used=len(self.kv), n_ctx=self.settings.n_ctx, first_token_s=FIRST,
            ubatches=((computed, prefill_s),))
        return ev.TurnDone(0, "n_predict", "", m, 0.0)

    def close(self, timeout=3.0):
        self.calls.append(("close",))


@pytest.fixture
def fake(monkeypatch, smollm_shaped):
    FakeEngine.opened = []
    recorded = []
    monkeypatch.setattr(bench, "open_engine", lambda settings, in_process, server=None, api_key=None:
                        FakeEngine(settings))
    monkeypatch.setattr(bench, "record_calibration", lambda settings, runs, server, share=None: recorded.append((settings, runs)))

    def run(*argv):
        code = bench.bench_main([smollm_shaped, *argv])
        return code, FakeEngine.opened, recorded

    return run


def test_each_test_runs_and_times_what_llama_bench_does(fake, capsys):
    """pp: P tokens computed on an empty cache or on exactly the depth; tg: N decodes
    after the depth (or one BOS token); pp+tg: both. Rates are then the fake's speeds."""
    code, engines, _ = fake("-p", "64", "-n", "16", "-pg", "32,8", "-d", "0,100", "-r", "2", "--no-warmup",
                            "-o", "json")
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    got = {(r["n_prompt"], r["n_gen"], r["n_depth"]): r for r in rows}
    assert list(got) == [(64, 0, 0), (0, 16, 0), (32, 8, 0), (64, 0, 100), (0, 16, 100), (32, 8, 100)]
    for (p, n, d), r in got.items():
        want = (p + n) / (p / PP + (FIRST if p and n else 0.0) + n / TG)
        assert r["avg_ts"] == pytest.approx(want, rel=1e-6), (p, n, d)
        assert len(r["samples_ns"]) == 2 and r["stddev_ts"] == pytest.approx(0.0, abs=1e-3)
    (eng,) = engines
    calls = [c for c in eng.calls if c[0] == "generate"]
    # pp64: reset, then 64 tokens computed; tg16: one BOS token then 17 samples (16 decodes)
    assert eng.calls[0] == ("reset",) and calls[0] == ("generate", 64, 0, 1)
    assert ("generate", 1, 0, 17) in calls
    # pp64 @ d100: the depth filled (untimed), then exactly 64 tokens computed on top of it
    i = calls.index(("generate", 164, 100, 1))
    assert calls[i - 1][:2] == ("generate", 100)
    # tg16 @ d100: the depth's last token computed, then 16 decodes
    assert ("generate", 100, 99, 17) in calls


def test_one_load_per_load_setting_and_the_lists_share_it(fake, capsys):
    code, engines, recorded = fake("-p", "16,32", "-n", "4", "-t", "1,2", "-ub", "8,16", "-r", "1", "-o", "jsonl")
    assert code == 0
    assert [(e.settings.n_threads, e.settings.n_ubatch) for e in engines] == [(1, 8), (2, 8), (1, 16), (2, 16)]
    assert all(e.calls[-1] == ("close",) for e in engines)
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 12 and [r["n_ubatch"] for r in rows[:3]] == [8] * 3
    assert len(recorded) == 12 and all(len(runs) == 1 for _, runs in recorded)  # every measured run calibrates


def test_the_context_is_sized_to_the_largest_test_unless_c_is_given(fake, capsys):
    assert fake("-p", "512", "-n", "128", "-d", "1024", "-r", "1")[0] == 0
    assert FakeEngine.opened[-1].settings.n_ctx >= 1024 + 512 + 128
    assert fake("-p", "512", "-n", "0", "-c", "256", "-r", "1")[0] == 1
    assert "pp512 needs" in capsys.readouterr().err


def test_the_md_table_has_one_header_and_kvtops_note_under_it(fake, capsys):
    assert fake("-p", "64", "-n", "16", "-d", "0,32", "-fa", "0,1", "-r", "1")[0] == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| model ") and out[0].endswith("|  fa |            test |                  t/s |")
    assert [line.split("|")[-3].strip() for line in out[2:10]] == ["pp64", "tg16", "pp64 @ d32", "tg16 @ d32"] * 2
    assert [line.split("|")[-4].strip() for line in out[2:10]] == ["0"] * 4 + ["1"] * 4
    assert out[2].startswith("| llama 256M Q4_1                |  92.10 MiB |   134.52 M |")
    assert out[11].startswith("build: ") and len([x for x in out if x.startswith("kvtop: threads 2")]) == 2
    assert not any("params" in x for x in out[1:])  # one header: no second "model (...), N params" line


def test_progress_says_on_stderr_which_test_runs(fake, capsys):
    assert fake("-p", "16", "-n", "4", "-d", "0,8", "-r", "1", "--progress")[0] == 0
    assert capsys.readouterr().err.splitlines() == [
        "kvtop bench: test 1/4: pp16", "kvtop bench: test 2/4: tg4", "kvtop bench: test 3/4: pp16 @ d8",
        "kvtop bench: test 4/4: tg4 @ d8"]


def test_warmup_runs_before_each_test_untimed(fake, capsys):
    assert fake("-p", "64", "-n", "0", "-r", "2")[0] == 0
    (eng,) = FakeEngine.opened
    assert [c for c in eng.calls if c[0] == "generate"] == [("generate", 64, 0, 1)] * 3


@pytest.mark.parametrize("argv,why", [
    (["-t", "2"], "-t cannot change on a running llama-server"),
    (["-ub", "64,128", "-fa", "1"], "-ub, -fa cannot change"),
    (["-ctk", "q8_0"], "-ctk cannot change"),
    (["-ngl", "99"], "-ngl cannot change"),
    (["-c", "2048"], "-c cannot change"),
    (["-nkvo", "--rope-freq-base", "1e6"], "-nkvo, --rope-freq-base cannot change"),  # they were sent nowhere
    (["--mlock", "--no-mmap", "--swa-full"], "--swa-full, --mlock, --no-mmap cannot change"),
    (["-d", "512"], "-d needs the KV cache kept between requests"),
])
def test_a_server_refuses_what_it_cannot_change(argv, why, monkeypatch, capsys):
    monkeypatch.setattr(bench, "open_engine", lambda *a, **kw: pytest.fail("the server was asked"))
    with pytest.raises(SystemExit) as exc:
        bench.bench_main(["--server", "http://127.0.0.1:9", "-p", "16", *argv])
    assert exc.value.code == 2 and why in capsys.readouterr().err


def test_a_prompt_cache_file_is_refused(fake, capsys):
    """It would restore a saved KV cache into the tests' first turn."""
    with pytest.raises(SystemExit) as exc:
        fake("-p", "16", "--prompt-cache", "/tmp/x.bin")
    assert exc.value.code == 2 and "--prompt-cache would restore" in capsys.readouterr().err
    assert FakeEngine.opened == []


def test_json_is_o_json_and_they_do_not_conflict(fake, capsys):
    assert fake("-p", "16", "-n", "0", "-r", "1", "--json")[0] == 0
    assert json.loads(capsys.readouterr().out)[0]["n_prompt"] == 16
    with pytest.raises(SystemExit):
        bench.bench_main(["m.gguf", "--json", "-o", "csv"])


def test_a_failure_prints_the_finished_rows_then_one_line(fake, monkeypatch, capsys):
    real = FakeEngine.generate

    def broken(self, tokens, on_event=None, n_predict=128, ignore_eog=True):
        if n_predict > 1:
            return ev.TurnRefused(0, "the context is full", len(tokens), 0)
        return real(self, tokens, on_event, n_predict, ignore_eog)

    monkeypatch.setattr(FakeEngine, "generate", broken)
    assert fake("-p", "16", "-n", "8", "-r", "1", "-o", "csv")[0] == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and err.strip() == "kvtop: tg8: the context is full"


def test_seconds_of_refuses_a_run_that_did_not_compute_what_the_test_says():
    m = ev.TurnMetrics(prompt_tokens=80, reused_tokens=20, prefill_tokens=60, prefill_s=0.06, prefill_tok_s=1000.0,
                       template_s=0, tokenize_s=0, wait_s=0, ttft_s=0.07, decode_tokens=1, decode_s=0.0,
                       decode_tok_s=None, itl_p50_ms=None, itl_p95_ms=None, kv_cells_used=80, n_ctx=512)
    with pytest.raises(bench.BenchError, match="computed 60 prompt tokens, not 64"):
        bench.seconds_of(BenchTest(64, 0, 16), m)
    assert bench.seconds_of(BenchTest(60, 0, 20), m) == 0.06
    with pytest.raises(bench.BenchError, match="generated 1 tokens, not 9"):
        bench.seconds_of(BenchTest(0, 8), m)


def test_the_token_stream_has_one_bos_then_the_text_again_and_again():
    class Tok:
        def tokenize(self, text, add_special=True):
            return ([BOS] if add_special else []) + BODY

    s = bench.token_stream(Tok(), 50)
    assert s[0] == BOS and s.count(BOS) == 1 and s[1:21] == BODY and s[21:41] == BODY and len(s) >= 50


def test_a_servers_build_info_is_llama_benchs_commit_and_number():
    class L:
        server, build_info = "http://x", "b6123-1a2b3c4"

    assert bench.build_of(L) == ("1a2b3c4", 6123)
    L.build_info = "weird"
    assert bench.build_of(L) == ("weird", 0)


# ------------------------------------------------------------------- a file kvtop refuses

def test_a_file_llama_cpp_would_abort_on_never_reaches_the_engine(tmp_path, monkeypatch, capsys):
    path = write_tiny_llama(tmp_path / "k1000.gguf", None, block_count=1000)

    def no_engine(*a, **kw):
        raise AssertionError("the engine was started")

    monkeypatch.setattr(bench, "open_engine", no_engine)
    assert bench.bench_main([path, "-r", "1", "-p", "8", "-n", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "block_count says 1000 layers but the tensors describe 2" in err
