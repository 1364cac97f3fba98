"""-ot/--override-tensor (and -cmoe, -ncmoe, -ncffn), llama.cpp's tensor buffer overrides:
they were refused. The pattern reaches llama.cpp's loader (its log names each weight it
moved), the model still decodes, and a buffer type this build lacks is one line naming
the ones it has."""

import pytest
from test_engine_load_flags import _load_log as load_log

from kvtop.runner.engine.engine import Engine, EngineLoadError
from kvtop.runner.settings import Settings

BASE = dict(n_ctx=256, n_threads=1, n_ubatch=64, n_batch=64)


def _load_log(model: str, overrides) -> str:
    return load_log(Settings(model, **BASE, override_tensor=overrides))


def test_an_override_reaches_llama_cpps_loader(tiny_llama):
    log = _load_log(tiny_llama, ((r"blk\.0\.ffn_(up|down)", "CPU"),))
    moved = sorted(line.split()[1] for line in log.splitlines() if "buffer type overridden to CPU" in line)
    assert moved == ["blk.0.ffn_down.weight", "blk.0.ffn_up.weight"], log[-2000:]
    assert "buffer type overridden" not in _load_log(tiny_llama, ())


def test_a_buffer_type_this_build_lacks_is_one_line(tiny_llama):
    engine = Engine(Settings(tiny_llama, **BASE, override_tensor=((r"blk\.0", "CUDA7"),)), lambda e: None)
    with pytest.raises(EngineLoadError) as exc:
        engine.load()
    engine.close()
    msg = str(exc.value)
    assert "no buffer type 'CUDA7'" in msg and "CPU" in msg and "\n" not in msg, msg
