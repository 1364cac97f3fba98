"""kvtop kld agrees with llama.cpp's own llama-perplexity --kl-divergence (built from the
same vendored llama.cpp by .ci/build-llama-server), on the demo model and Gemma-3, over
kvtop's shipped text (runner/commands/kld_text.txt: about 9,000 tokens, written for
kvtop), with the same -c, chunks and cache types: mean KLD within 10% or within 0.0003
(llama-perplexity keeps the base's log-probabilities in 16 bits, a floor of its own),
"Same top p" within 0.5 points; and f16 against f16 gives KLD 0 and 100% same top.

Kept short: -c 256 and 2 chunks (254 positions scored), the decode-speed runs off."""

import json
import re
import subprocess
import sys

import pytest
from helpers import cores

from kvtop.runner.commands.kld import DEFAULT_TEXT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # a first run builds llama-perplexity (minutes)
C, CHUNKS = 256, 2
MODELS = ["smollm_path", "gemma_path"]


@pytest.fixture(scope="module")
def perplexity_bin():
    from llama_server import perplexity_binary

    return perplexity_binary()


def llama_perplexity(binary, model, *extra, cwd):
    r = subprocess.run([binary, "-m", model, "-f", DEFAULT_TEXT, "-c", str(C), "--chunks", str(CHUNKS),
                        "-t", str(cores()), *extra], capture_output=True, text=True, timeout=1800, cwd=cwd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def base_files(perplexity_bin, tmp_path_factory):
    """Per model: llama-perplexity's base run (f16/f16), its log-probabilities file."""
    made = {}

    def get(model):
        if model not in made:
            d = tmp_path_factory.mktemp("ppl-base")
            llama_perplexity(perplexity_bin, model, "--kl-divergence-base", str(d / "base.kld"), cwd=d)
            made[model] = str(d / "base.kld")
        return made[model]

    return get


def number(pattern, text):
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in llama-perplexity's output:\n{text[-3000:]}"
    return float(m.group(1))


def kvtop_kld(model, *extra):
    r = subprocess.run([sys.executable, "-m", "kvtop", "kld", model, "-c", str(C), "--chunks", str(CHUNKS),
                        "-t", str(cores()), "--decode-tokens", "0", "-o", "json", *extra],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)["statistics"]


@pytest.mark.parametrize("kv", ["q8_0", "q4_0"])
@pytest.mark.parametrize("model_fixture", MODELS)
def test_mean_kld_and_same_top_agree_with_llama_perplexity(request, perplexity_bin, base_files, model_fixture,
                                                           kv, tmp_path):
    model = request.getfixturevalue(model_fixture)
    out = llama_perplexity(perplexity_bin, model, "--kl-divergence", "--kl-divergence-base", base_files(model),
                           "-ctk", kv, "-ctv", kv, cwd=tmp_path)
    theirs = {"kld": number(r"Mean\s+KLD:\s+(-?[\d.]+)", out), "top": number(r"Same top p:\s+([\d.]+)", out),
              "ppl_base": number(r"Mean PPL\(base\)\s+:\s+([\d.]+)", out)}
    ours = kvtop_kld(model, "-ctk", kv, "-ctv", kv)
    print(f"{model_fixture} {kv}: kvtop KLD {ours['kld_mean']:.6f} same top {100 * ours['same_top']:.3f}%, "
          f"llama-perplexity KLD {theirs['kld']:.6f} same top {theirs['top']:.3f}%")
    assert ours["count"] == CHUNKS * (C - 1 - C // 2)
    assert abs(ours["kld_mean"] - theirs["kld"]) <= max(0.1 * theirs["kld"], 0.0003)
    assert abs(100 * ours["same_top"] - theirs["top"]) <= 0.5
    assert ours["ppl_base"] == pytest.approx(theirs["ppl_base"], rel=0.005)  # the same base, the same tokens


@pytest.mark.parametrize("model_fixture", MODELS)
def test_f16_against_f16_is_zero(request, model_fixture):
    s = kvtop_kld(request.getfixturevalue(model_fixture), "-ctk", "f16", "-ctv", "f16")
    assert s["kld_mean"] == 0.0 and s["kld_percentiles"]["max"] == 0.0 and s["same_top"] == 1.0
    assert s["ln_ppl_ratio"] == 0.0 and s["rms_p_diff"] == 0.0
