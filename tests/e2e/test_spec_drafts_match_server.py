"""kvtop's ngram-simple drafts what llama-server's drafts (issue 36: "the same flags draft the
same tokens"): the real llama-server the tests build and kvtop's engine, both on the demo
model with ``--spec-type ngram-simple`` at its defaults (12, 48), on bench/speculative.py's
ordinary chat prompt, greedy, ``-n 128`` with the end of generation ignored. The drafter
is a function of the tokens, so the same tokens must give the same drafts: equal, not
within a tolerance. ``ignore_eos`` is llama.cpp's (every end-of-generation token biased
to -inf, never sampled); kvtop used to sample one and go on past it, into another text
than the server's, where it drafted 0 tokens to the server's 71.

On bench/speculative.py's copy prompt, which drafts from the first step, kvtop drafts one
token fewer, by design: the engine's first speculative turn makes its first step a plain
one (to time a plain step for "Nx plain decode"), so its first draft comes a token later,
capped by ``-n`` one token lower (45 of 48 where the server's is 46); every one accepted
by both."""

import pytest
from llama_server import llama_server, post_json

from kvtop.runner.engine.engine import Engine
from kvtop.runner.settings import Settings

CHAT = "Question: Why is the sky blue? Explain it simply, in a short paragraph.\nAnswer:"  # bench/speculative.py's
TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the great clock, "
        "trimmed the wick, polished the brass lens until it shone, and wrote the weather in his logbook: wind "
        "from the north-west, a heavy swell, rain before midnight. Ships passed far out on the dark water, and "
        "each one answered his light with a long low horn.")
COPY = f"Text: {TEXT}\nCopy: {TEXT}\n\nText: {TEXT}\nCopy:"  # bench/speculative.py's
N = 128


def ask(url: str, prompt: str, n: int) -> dict:
    return post_json(url + "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": False,
                                           "ignore_eos": True, "return_tokens": True}, timeout=600)


@pytest.fixture(scope="module")
def served(llama_server_bin, smollm_path, tmp_path_factory):
    with llama_server(llama_server_bin, smollm_path, "-t", "2", "--spec-type", "ngram-simple", slots=1, ctx=2048,
                      log_dir=str(tmp_path_factory.mktemp("spec-vs"))) as (url, _):
        yield url


@pytest.fixture(scope="module")
def server_turn(served):
    return ask(served, CHAT, N)


def kvtop_turn(model: str, spec_type: str, prompt: str = CHAT, n: int = N):
    ids: list[int] = []

    def emit(e):
        if type(e).__name__ == "TokenEvent" and e.token_id >= 0:
            ids.append(e.token_id)

    eng = Engine(Settings(model, n_ctx=2048, n_threads=2, temp=0.0, spec_type=spec_type), emit)
    eng.load()
    try:
        done = eng.generate(eng.tokenize(prompt, add_special=True), n_predict=n, ignore_eog=True)
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


def test_on_the_copy_prompt_kvtop_drafts_one_token_fewer_its_first_step_being_plain(served, smollm_path):
    t = ask(served, COPY, 48)["timings"]
    ids, m = kvtop_turn(smollm_path, "ngram-simple", COPY, 48)
    assert t["draft_n"] == t["draft_n_accepted"] > 0
    assert m.spec_plain_steps >= 1  # the timed plain step, where the server drafted
    assert (m.spec_drafted, m.spec_accepted) == (t["draft_n"] - 1, t["draft_n_accepted"] - 1)
