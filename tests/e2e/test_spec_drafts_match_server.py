"""kvtop's ngram-simple drafts what llama-server's drafts (issue 36: "the same flags draft the
same tokens"): the real llama-server the tests build and kvtop's engine, both on the demo
model with ``--spec-type ngram-simple`` at its defaults (12, 48), on bench/speculative.py's
ordinary chat prompt, greedy, ``-n 128`` with the end of generation ignored. The drafter
is a function of the tokens, so the same tokens must give the same drafts: equal, not
within a tolerance. ``ignore_eos`` is llama.cpp's (every end-of-generation token biased
to -inf, never sampled); kvtop used to sample one and go on past it, into another text
than the server's, where it drafted 0 tokens to the server's 71."""

import pytest
from llama_server import llama_server, post_json

from kvtop.runner.engine.engine import Engine
from kvtop.runner.settings import Settings

CHAT = "Question: Why is the sky blue? Explain it simply, in a short paragraph.\nAnswer:"  # bench/speculative.py's
N = 128


@pytest.fixture(scope="module")
def server_turn(llama_server_bin, smollm_path, tmp_path_factory):
    with llama_server(llama_server_bin, smollm_path, "-t", "2", "--spec-type", "ngram-simple", slots=1, ctx=2048,
                      log_dir=str(tmp_path_factory.mktemp("spec-vs"))) as (url, _):
        return post_json(url + "/completion", {"prompt": CHAT, "n_predict": N, "temperature": 0,
                                               "cache_prompt": False, "ignore_eos": True, "return_tokens": True},
                         timeout=600)


def kvtop_turn(model: str, spec_type: str):
    ids: list[int] = []

    def emit(e):
        if type(e).__name__ == "TokenEvent" and e.token_id >= 0:
            ids.append(e.token_id)

    eng = Engine(Settings(model, n_ctx=2048, n_threads=2, temp=0.0, spec_type=spec_type), emit)
    eng.load()
    try:
        done = eng.generate(eng.tokenize(CHAT, add_special=True), n_predict=N, ignore_eog=True)
    finally:
        eng.close()
    return ids, done.metrics


def test_kvtop_drafts_and_accepts_what_llama_server_does_on_the_chat_prompt(server_turn, smollm_path):
    ids, m = kvtop_turn(smollm_path, "ngram-simple")
    t = server_turn["timings"]
    assert ids == server_turn["tokens"]  # the same text, so the drafter sees the same history
    assert t.get("draft_n", 0) > 0, "the server drafted nothing: the comparison says nothing"
    assert (m.spec_drafted, m.spec_accepted) == (t["draft_n"], t["draft_n_accepted"])


def test_ignoring_the_end_of_generation_never_samples_it_as_llama_server(server_turn, smollm_path):
    ids, m = kvtop_turn(smollm_path, "none")
    assert m.spec_drafted == 0 and len(ids) == N
    assert ids == server_turn["tokens"]
