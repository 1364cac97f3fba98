"""DRY (--dry-multiplier …), llama.cpp's repetition penalty for whole sequences, in the real
engine on the demo model: it sits in the chain where llama.cpp puts it (after the penalties),
it sees the prompt as llama-server's sampler does, and at --temp 0 it changes a reply that
repeats itself into one that repeats less. A flag parsed but never in the chain would leave
the reply as it was."""

import llama_cpp
from helpers import tiny_context

from kvtop.runner import events as ev
from kvtop.runner.engine.decode import Sampling
from kvtop.runner.engine.engine import Engine
from kvtop.runner.settings import Settings

PROMPT = "one two three four one two three four one two three four one two three four one two three"


def _reply(path: str, **kw) -> list[int]:
    s = Settings(path, n_ctx=512, n_threads=1, temp=0.0, seed=1, **kw)
    engine = Engine(s, lambda e: None)
    try:
        engine.load()
        done = engine.generate(engine.tokenize(PROMPT), turn_id=1, n_predict=40, ignore_eog=True)
        assert isinstance(done, ev.TurnDone)
        return list(engine.cached[-40:])
    finally:
        engine.close()


def _repeats(tokens: list[int], n: int = 3) -> int:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))


def test_dry_is_in_the_chain_after_the_penalties(smollm_path):
    s = Settings(smollm_path, temp=0.0, repeat_penalty=1.1, dry_multiplier=0.8)
    with tiny_context(smollm_path) as (model, _ctx):
        chain = Sampling.of(s).chain(model.vocab.n_tokens(), model.vocab.ptr)
        try:
            names = [llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain.ptr, i))
                     for i in range(llama_cpp.llama_sampler_chain_n(chain.ptr))]
        finally:
            chain.close()
    assert names == [b"penalties", b"dry", b"greedy"]


def test_dry_changes_a_reply_that_repeats_itself(smollm_path):
    plain = _reply(smollm_path)
    dry = _reply(smollm_path, dry_multiplier=2.0, dry_allowed_length=1, dry_sequence_breakers=())
    assert _repeats(plain) > 5, plain  # the demo model continues the pattern at temp 0
    assert dry != plain and _repeats(dry) < _repeats(plain), (plain, dry)
