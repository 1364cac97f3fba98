"""--lora and --lora-scaled (llama.cpp's flags; they were refused): the real engine applies
a LoRA adapter to the context, so the tiny model's greedy reply changes; scale 0 leaves it as
without the adapter; the status bar names it; a file that is no adapter for this model is one
line from llama.cpp, and the engine is left closed."""

import pytest
from gguf_factory import write_tiny_lora

from kvtop.runner import events as ev
from kvtop.runner.engine.engine import Engine, EngineLoadError
from kvtop.runner.settings import Settings


def _greedy(model: str, lora=()) -> tuple[list[int], ev.Loaded]:
    engine = Engine(Settings(model, n_ctx=256, n_threads=1, n_ubatch=64, n_batch=64, temp=0.0, lora=lora),
                    lambda e: None)
    try:
        loaded = engine.load()
        done = engine.generate(list(range(300, 320)), turn_id=1, n_predict=12, ignore_eog=True)
        assert isinstance(done, ev.TurnDone)
        return list(engine.cached[-12:]), loaded
    finally:
        engine.close()


def test_a_lora_adapter_changes_the_reply_and_scale_0_does_not(tiny_llama, tmp_path):
    adapter = write_tiny_lora(tmp_path / "tiny-lora.gguf", scale=0.5)
    plain, loaded = _greedy(tiny_llama)
    assert loaded.lora == ""
    adapted, loaded = _greedy(tiny_llama, ((adapter, 1.0),))
    assert loaded.lora == "tiny-lora.gguf x1"
    assert adapted != plain
    off, _ = _greedy(tiny_llama, ((adapter, 0.0),))
    assert off == plain


def test_an_adapter_for_another_model_is_one_line(tiny_llama, tmp_path):
    wrong = write_tiny_lora(tmp_path / "wide-lora.gguf", n_embd=128)  # the tiny model's n_embd is 64
    with pytest.raises(EngineLoadError) as exc:
        _greedy(tiny_llama, ((wrong, 1.0),))
    msg = str(exc.value)
    assert msg.startswith("--lora ") and "wide-lora.gguf" in msg and "\n" not in msg, msg
    not_gguf = tmp_path / "notes.txt"
    not_gguf.write_text("not an adapter")
    with pytest.raises(EngineLoadError, match="--lora .*notes.txt"):
        _greedy(tiny_llama, ((str(not_gguf), 1.0),))
