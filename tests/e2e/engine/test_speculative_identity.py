"""Speculative decoding gives the model's own tokens (issue 36): the same engine on the
real demo model, with and without --spec-type, at --temp 0 and sampling with a seed;
each speculative run must have drafted and accepted, or the comparison says nothing."""

import threading

import pytest

from kvtop.runner.engine.engine import Engine
from kvtop.runner.settings import Settings

TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single "
        "step. All that glitters is not gold. Actions speak louder than words.")
COPY = f"Repeat this text exactly, word for word: {TEXT}"
CHAT = "What is the capital of France? Answer in two sentences."
SMALL = dict(spec_ngram_simple_size_n=2, spec_ngram_simple_size_m=8)  # drafts on a short copy


def run(model, turns, n_predict=40, cancel_at=None, **kw):
    """Token ids per turn, the engine's cached tokens after each, and the last metrics."""
    cancel = threading.Event()
    ids: list[list[int]] = []
    shifts = kw.pop("shifts", [])

    def emit(e):
        if type(e).__name__ == "ContextShifted":
            shifts.append(e)
        if type(e).__name__ == "TokenEvent" and e.token_id >= 0:
            ids[-1].append(e.token_id)
            if cancel_at is not None and e.index == cancel_at:
                cancel.set()

    eng = Engine(Settings(model=model, n_predict=n_predict, **{"n_ctx": 1024, "temp": 0.0, **kw}), emit, cancel)
    eng.load()
    cached, metrics, messages = [], [], []
    try:
        for text in turns:
            ids.append([])
            messages.append({"role": "user", "content": text})
            done = eng.chat(messages)
            cancel.clear()
            messages.append({"role": "assistant", "content": done.text})
            cached.append((list(eng.cached), eng.kv_cells_used()))
            metrics.append(done.metrics)
    finally:
        eng.close()
    return ids, cached, metrics


@pytest.mark.parametrize("prompt", [COPY, CHAT], ids=["copy", "chat"])
def test_ngram_simple_at_temp_0_gives_plain_decodes_tokens_over_two_turns(smollm_path, prompt):
    plain, plain_kv, _ = run(smollm_path, [prompt, "Again, please."])
    spec, spec_kv, m = run(smollm_path, [prompt, "Again, please."], spec_type="ngram-simple", **SMALL)
    assert spec == plain and spec_kv == plain_kv
    assert all(len(toks) == n for toks, n in spec_kv)  # no rejected cell left in the cache
    assert sum(x.spec_drafted for x in m) > 0 and m[0].spec_type == "ngram-simple"
    if prompt is COPY:
        assert m[0].spec_accepted > 0 and m[0].spec_passes > 0


def test_identity_holds_across_a_context_shift(smollm_path):
    """A 256-token context over four copy turns: the shift cuts the oldest turns' cells
    out and moves the rest back; the speculative engine's tokens and cache stay plain's."""
    turns = [COPY] * 4  # ~60 tokens each, and a reply: the third cannot fit beside the first two
    plain_shifts, spec_shifts = [], []
    plain, plain_kv, _ = run(smollm_path, turns, n_predict=48, n_ctx=256, shifts=plain_shifts)
    spec, spec_kv, m = run(smollm_path, turns, n_predict=48, n_ctx=256, shifts=spec_shifts,
                           spec_type="ngram-simple", **SMALL)
    assert plain_shifts and len(spec_shifts) == len(plain_shifts), "the test needs a shift"
    assert spec == plain and spec_kv == plain_kv
    assert any(e.dropped_turns for e in spec_shifts)
    assert m[-1].spec_accepted > 0  # the last turn, on a shifted cache, speculated


def test_default_ngram_sizes_and_the_other_drafters_give_the_same_tokens(smollm_path):
    plain, plain_kv, _ = run(smollm_path, [COPY])
    for spec_type in ("ngram-simple", "ngram-map-k", "ngram-mod"):
        spec, spec_kv, _ = run(smollm_path, [COPY], spec_type=spec_type, spec_ngram_map_k_size_n=2,
                               spec_ngram_map_k_size_m=8, spec_ngram_mod_n_match=2, spec_ngram_mod_n_min=1)
        assert spec == plain and spec_kv == plain_kv, spec_type


def test_draft_simple_with_the_model_drafting_for_itself(smollm_path):
    plain, plain_kv, _ = run(smollm_path, [COPY, CHAT])
    spec, spec_kv, m = run(smollm_path, [COPY, CHAT], spec_type="draft-simple", spec_draft_model=smollm_path,
                           spec_draft_n_max=4)
    assert spec == plain and spec_kv == plain_kv
    # a model drafting for itself is right nearly every time (batch and single decodes may
    # round apart, so not always)
    assert m[0].spec_passes > 0 and m[0].spec_accepted >= 0.8 * m[0].spec_drafted


def test_sampling_with_a_seed_gives_plain_decodes_tokens(smollm_path):
    kw = dict(temp=0.3, seed=1234, repeat_penalty=1.05)  # low enough that the reply copies, so drafts land
    plain, plain_kv, _ = run(smollm_path, [COPY], **kw)
    spec, spec_kv, m = run(smollm_path, [COPY], spec_type="ngram-simple", **SMALL, **kw)
    assert spec == plain and spec_kv == plain_kv and m[0].spec_passes > 0


@pytest.mark.parametrize("n_predict,cancel_at", [(13, None), (-1, 9)], ids=["n_predict", "cancel"])
def test_a_stop_inside_an_accepted_draft_leaves_the_cache_as_plain_decode_does(smollm_path, n_predict, cancel_at):
    """-n reached, or Esc, part way through a verify pass's accepted tokens: the same
    tokens, the same cache; the next turn (which reuses that cache) is the same too."""
    turns = [COPY, "Once more."]
    plain, plain_kv, _ = run(smollm_path, turns, n_predict=n_predict, cancel_at=cancel_at)
    spec, spec_kv, m = run(smollm_path, turns, n_predict=n_predict, cancel_at=cancel_at,
                           spec_type="ngram-simple", **SMALL)
    assert spec == plain and spec_kv == plain_kv and m[0].spec_passes > 0


def test_gemma3_copy_at_temp_0(gemma_path):
    plain, plain_kv, _ = run(gemma_path, [COPY], n_predict=30)
    spec, spec_kv, m = run(gemma_path, [COPY], n_predict=30, spec_type="ngram-simple", **SMALL)
    assert spec == plain and spec_kv == plain_kv and m[0].spec_drafted > 0


def test_the_engine_refuses_a_draft_model_of_another_vocabulary(smollm_path, gemma_path):
    """The header check before start is the CLI's; the engine compares the loaded
    vocabularies as common_speculative_are_compatible does, and frees what it loaded."""
    from kvtop.runner.engine.errors import EngineLoadError

    eng = Engine(Settings(model=smollm_path, n_ctx=512, spec_type="draft-simple", spec_draft_model=gemma_path),
                 lambda _e: None)
    with pytest.raises(EngineLoadError, match=r"^-md .*: not a draft for this model: its "):
        eng.load()
    eng.close()
