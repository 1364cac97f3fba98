"""llama.cpp's load flags kvtop takes (issue 33): --rope-freq-base/--rope-freq-scale reach
llama.cpp's context when the real engine loads the tiny model, as llama.cpp's own log of
the context says; with -nkvo and --numa too the model loads and decodes (on this CPU-only,
one-node machine llama.cpp logs neither)."""

import re

from kvtop.runner import events as ev
from kvtop.runner.engine.engine import Engine
from kvtop.runner.engine.llama_log import CAPTURE
from kvtop.runner.settings import Settings


def _load_log(settings: Settings) -> str:
    engine = Engine(settings, lambda e: None)
    mark = CAPTURE.mark()
    try:
        engine.load()
        done = engine.generate(list(range(300, 310)), turn_id=1, n_predict=2, ignore_eog=True)
        assert isinstance(done, ev.TurnDone)
        return CAPTURE.since(mark)
    finally:
        engine.close()


def test_rope_reaches_llama_cpps_context_and_nkvo_numa_load(tiny_llama):
    base = dict(n_ctx=256, n_threads=1, n_ubatch=64, n_batch=64)
    plain = _load_log(Settings(tiny_llama, **base))
    changed = _load_log(Settings(tiny_llama, **base, rope_freq_base=123456.0, rope_freq_scale=0.5,
                                 kv_offload=False, numa="distribute"))
    assert re.search(r"llama_context: freq_base +=  ?123456\.0\n", changed), changed
    assert re.search(r"llama_context: freq_scale +=  ?0\.5\n", changed), changed
    assert re.search(r"llama_context: freq_base += 10000\.0\n", plain)  # the GGUF's
