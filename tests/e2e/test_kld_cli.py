"""kvtop kld as users run it, on real models: a random-weight tiny llama with SmolLM2's
tokenizer (fast), a second one of another seed (a "weights quantization" of the same
vocabulary), SmolLM2 and Gemma-3 (vocabularies that differ). Bad input is one line on
stderr and exit 1; Ctrl+C prints the statistics so far, marked partial, and exits 130.
The agreement with llama-perplexity itself: test_kld_matches_llama_perplexity.py."""

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import cores

from kvtop.runner.commands.kld import DEFAULT_TEXT


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "kvtop", "kld", *args], capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(r, *words):
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kvtop: "), r.stderr
    for w in words:
        assert w in last, last
    return last


SHAPE = {"n_embd": 128, "n_head": 2, "n_head_kv": 1}  # head size 64: whole blocks of 32 for q8_0/q4_0 rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, smollm_path):
    from gguf_factory import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf", smollm_path, **SHAPE)


@pytest.fixture(scope="module")
def tiny_other(tmp_path_factory, smollm_path):
    from gguf_factory import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny2") / "tiny-llama-2.gguf", smollm_path, seed=1, **SHAPE)


def test_a_quantized_cache_report_has_the_statistics_the_bytes_and_the_speed(tiny):
    r = run(tiny, "-ctk", "q8_0", "-ctv", "q8_0", "-c", "128", "--chunks", "3", "--decode-tokens", "8",
            "-t", str(cores()), "-o", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    s = rep["statistics"]
    assert s["count"] == 3 * (128 - 1 - 64) and s["chunks"] == 3 and not rep["partial"]
    assert s["kld_mean"] > 0 and s["kld_percentiles"]["max"] >= s["kld_percentiles"]["median"] >= 0
    assert 0 < s["same_top"] <= 1 and s["rms_p_diff"] > 0
    (at_c, at_train) = rep["kv_bytes"]["at"]
    assert at_c["n_ctx"] == 256 and at_train["what"] == "trained context" and at_train["n_ctx"] == 2048  # padded
    assert at_c["candidate_bytes"] == at_c["base_bytes"] * 34 // 64  # q8_0: 34 bytes a block of 32, f16 64
    d = rep["decode"]
    assert d["base"] > 0 and d["candidate"] > 0 and d["tokens"] == 8 and d["depth"] == 120
    assert rep["type_k"] == "q8_0" and rep["base_type_k"] == "f16" and rep["other_model"] is None
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("kvtop kld: chunk ")]
    assert len(progress) == 3 and progress[-1].startswith("kvtop kld: chunk 3/3"), progress
    # no "ETA 0 s" before the decode speed is measured (new-user trial): the last line says what comes
    assert all("ETA" in ln and "ETA 0 " not in ln for ln in progress[:-1]), progress
    assert "ETA" not in progress[-1] and "measuring the decode speed (8 tokens a side)" in progress[-1], progress


def test_the_md_report_reads_like_llama_perplexity(tiny):
    r = run(tiny, "-ctk", "q4_0", "-ctv", "q4_0", "-c", "128", "--chunks", "2", "--decode-tokens", "0",
            "-t", str(cores()))
    assert r.returncode == 0, r.stderr[-2000:]
    for line in ("====== KL divergence statistics ======", "Mean    KLD:", "99.9%   KLD:", "Median  KLD:",
                 "Minimum KLD:", "Mean    Δp:", "RMS Δp    :", "Same top p:", "Mean ln(PPL(Q)/PPL(base))",
                 "KV cache at     256 tokens (-c)"):
        assert line in r.stdout, line
    assert "PARTIAL" not in r.stdout and "Decode speed" not in r.stdout


def test_a_second_model_of_the_same_vocabulary_is_measured_against_the_first(tiny, tiny_other):
    r = run(tiny, tiny_other, "-c", "128", "--chunks", "2", "--decode-tokens", "4", "-t", str(cores()),
            "-o", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert rep["other_model"] == tiny_other and rep["candidate"].startswith("tiny-llama-2.gguf f16/f16")
    s = rep["statistics"]
    assert s["kld_mean"] > 0 and s["same_top"] < 0.9  # random weights of another seed: the top tokens differ


def test_vocabularies_that_differ_are_refused(smollm_path, gemma_path):
    one_line_error(run(smollm_path, gemma_path, "--decode-tokens", "0"), "the vocabularies differ",
                   "49,152", "262,144")


def test_a_text_too_short_for_two_chunks_says_the_minimum(tiny, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Only a few words here, far fewer than two chunks of tokens. " * 20)
    r = run(tiny, "-f", str(short), "-c", "256")
    one_line_error(r, "-c 256 needs at least 512")
    assert r.stdout == ""


def test_a_quantized_v_cache_without_flash_attention_gives_llama_cpps_reason(tiny):
    one_line_error(run(tiny, "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "off", "-c", "128"),
                   "quantized V cache requires flash_attn")


def test_a_cache_type_the_head_size_cannot_hold_gives_llama_cpps_reason(tiny_llama):
    """tests/conftest.py's tiny llama has heads of 16 values: a q8_0 block is 32."""
    one_line_error(run(tiny_llama, "-ctk", "q8_0", "-c", "128"), "-ctk q8_0", "does not divide n_embd_head_k=16")


def test_a_pair_that_does_not_fit_in_memory_says_how_much_it_needs(smollm_path):
    """Two caches of 20 million cells of the demo model (about 430 GiB each): refused before
    anything is loaded, with the sum and its parts, and the memory free."""
    r = run(smollm_path, "-ctk", "q8_0", "-ctv", "q8_0", "-c", "20000000", timeout=60)
    one_line_error(r, "the base and the candidate need about", "GiB at once at -c 20,000,000 (weights 0.",
                   "GiB of RAM is free: give a smaller -c")
    assert r.stdout == ""


def test_nan_logits_name_the_position_and_stop(tmp_path, smollm_path):
    """A model whose embedding of one token is NaN (its output matrix its own, finite): the
    logits turn NaN where that token first comes. llama.cpp adds the causal mask to the
    scores, and NaN plus -inf is NaN, so the whole micro-batch holding the token turns NaN:
    with -ub 4 that starts at the token itself. The first chunk is clean; the token first
    comes in the scored half of the second: the error names its position, and what was
    scored before it is printed, marked partial."""
    import llama_cpp
    from gguf_factory import write_tiny_llama

    from kvtop.runner.engine.handles import Model

    c, ub = 128, 4
    text = open(DEFAULT_TEXT, encoding="utf-8").read()
    mp = llama_cpp.llama_model_default_params()
    mp.vocab_only = True
    with Model(llama_cpp.llama_model_load_from_file(smollm_path.encode(), mp)) as m:
        toks = m.vocab.tokenize(text, add_special=True, parse_special=False)
    seen_before = set(toks[:c + c // 2])
    pos, tok = next((p, t) for p, t in enumerate(toks[c + c // 2:2 * c - 1], start=c + c // 2)
                    if t not in seen_before and t not in toks[c + c // 2:p] and p % ub == 0)
    model = write_tiny_llama(tmp_path / "nan.gguf", smollm_path, nan_token=tok, **SHAPE)
    r = run(model, "-c", str(c), "-ub", str(ub), "--chunks", "3", "-o", "json", "-t", str(cores()))
    one_line_error(r, f"at position {pos - c} of chunk 2 (token {pos:,} of the text)", "NaN", "stopped")
    rep = json.loads(r.stdout)
    s = rep["statistics"]
    assert rep["partial"] and s["chunks"] == 1 and s["count"] == (c - 1 - c // 2) + (pos - c - c // 2)


def test_ctrl_c_prints_the_statistics_so_far_marked_partial(smollm_path):
    p = subprocess.Popen([sys.executable, "-m", "kvtop", "kld", smollm_path, "-c", "128", "-ctk", "q8_0", "-ctv",
                          "q8_0", "-t", str(cores()), "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        lines = []
        while not any("chunk 2/" in ln for ln in lines):
            line = p.stderr.readline()
            assert line, "kvtop kld ended before its second chunk: " + "".join(lines)
            lines.append(line)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    rep = json.loads(out)
    s = rep["statistics"]
    assert rep["partial"] and s["partial"] and s["chunks"] >= 2 and s["count"] == s["chunks"] * 63
    assert "partial" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert rep["decode"] is None


def test_an_unreadable_text_and_a_missing_model_are_one_line(tiny, tmp_path):
    one_line_error(run(tiny, "-f", str(tmp_path / "nope.txt")), "cannot read the text")
    one_line_error(run(str(tmp_path / "nope.gguf")), "no such file")


def test_the_shipped_text_gives_two_chunks_of_4096_on_the_demo_model(smollm_path):
    """kvtop's own text (runner/commands/kld_text.txt, written for kvtop) is over 8,000
    tokens on both bundled models' vocabularies (SmolLM2: 9,092; Gemma-3: 8,908)."""
    import llama_cpp

    from kvtop.runner.engine.handles import Model

    assert os.path.getsize(DEFAULT_TEXT) > 40_000
    mp = llama_cpp.llama_model_default_params()
    mp.vocab_only = True
    with Model(llama_cpp.llama_model_load_from_file(smollm_path.encode(), mp)) as m:
        n = len(m.vocab.tokenize(open(DEFAULT_TEXT, encoding="utf-8").read(), True, False))
    assert n > 8192


def test_estimate_lists_each_kv_types_measured_kld(tiny, tmp_path):
    """A finished kvtop kld run is kept (numbers only) for kvtop estimate, which lists each
    KV type's bytes and, where measured against f16/f16, its KLD and top-token agreement."""
    env = {**os.environ, "KVTOP_HOME": str(tmp_path)}

    def kvtop(*args):
        return subprocess.run([sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=300,
                              env=env)

    before = kvtop("estimate", tiny, "-c", "2048")
    assert before.returncode == 0, before.stderr
    assert "KLD not measured (kvtop kld -ctk q8_0 -ctv q8_0)" in before.stdout
    r = kvtop("kld", tiny, "-ctk", "q8_0", "-ctv", "q8_0", "-c", "128", "--chunks", "3", "--decode-tokens", "0",
              "-t", str(cores()), "-o", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(r.stdout)["statistics"]
    after = kvtop("estimate", tiny, "-c", "2048")
    (line,) = [ln for ln in after.stdout.splitlines() if ln.strip().startswith("q8_0/q8_0")]
    assert f"KLD {s['kld_mean']:.4f}" in line and f"over {s['count']:,} tokens" in line and "-c 128" in line
    assert "KLD not measured (kvtop kld -ctk q4_0 -ctv q4_0)" in after.stdout
    j = json.loads(kvtop("estimate", tiny, "-c", "2048", "--json").stdout)
    (q8,) = [t for t in j["kv_types"] if t["type_k"] == "q8_0"]
    assert q8["measured"]["kld_mean"] == pytest.approx(s["kld_mean"]) and q8["kv_bytes"] > 0
    saved = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if os.sep + "kld" + os.sep in
             os.path.join(d, f)]
    assert saved and all("lighthouse" not in open(f, encoding="utf-8").read() for f in saved)  # numbers, no text
