"""A prompt longer than the context is refused with counts written as everywhere else."""

from kvtop.runner import events as ev
from kvtop.runner.engine.engine import Engine
from kvtop.runner.settings import Settings


def test_a_prompt_over_the_context_is_refused_with_separated_counts(tiny_llama):
    seen = []
    engine = Engine(Settings(tiny_llama, n_ctx=1024, n_threads=1, n_ubatch=64, n_batch=64), seen.append)
    try:
        engine.load()
        done = engine.generate(list(range(300, 300 + 1500)), turn_id=3)
    finally:
        engine.close()
    assert isinstance(done, ev.TurnRefused)
    assert done.reason == "prompt is 1,500 tokens but the context holds 1,024: start a new chat or raise -c"
