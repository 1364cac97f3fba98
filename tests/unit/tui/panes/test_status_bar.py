"""The status bar names the model by its file and its quant by the GGUF's file type.

llama.cpp describes Gemma-3 270M Q4_K_M as "gemma3 270M Q4_K - Medium", and the bar
used to show its last word as the quant; the GGUF's ``general.name`` of the demo model
is a training run's ("Smollm2 135M 8k Lc100K Mix1 Ep2"), and the bar showed it instead
of the file the user gave."""

import dataclasses
import os

from helpers import make_app, screen_text, wait_until
from scripted_engine import ScriptedEngine, smollm_loaded

from kvtop.runner.model.inspect import load_facts
from kvtop.runner.settings import Settings


def status_line(app) -> str:
    return screen_text(app).splitlines()[0]


def gemma_like(path: str):
    """What the engine reports for a Q4_K_M GGUF (llama.cpp's description), and the
    facts kvtop's header reader gives for it."""
    loaded = dataclasses.replace(smollm_loaded(path), name="Gemma 3 270m It",
                                 description="gemma3 270M Q4_K - Medium", file_type="Medium")
    facts = dataclasses.replace(load_facts(path), file_type="Q4_K_M", name="Gemma 3 270m It")
    return loaded, facts


def demo(path: str):
    """The demo model as the engine reports it: named by its ``general.name``."""
    facts = load_facts(path)
    return dataclasses.replace(smollm_loaded(path), name=facts.name), facts


async def _shown(tmp_path, path: str, model) -> str:
    loaded, facts = model(path)
    app = make_app(Settings(path, n_ctx=4096, n_threads=2), lambda s: ScriptedEngine(s, loaded, []),
                   tmp_path, live_system=False, write_transcript=False, facts=facts)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.pause()
        return status_line(app)


async def test_the_quant_is_the_gguf_file_type_not_the_last_word_of_llama_cpps_description(tmp_path, smollm_shaped):
    line = await _shown(tmp_path, smollm_shaped, gemma_like)
    assert "quant Q4_K_M" in line and "Medium" not in line


async def test_the_model_is_named_by_its_file_and_by_its_metadata_name_only_where_that_helps(tmp_path, smollm_shaped):
    line = await _shown(tmp_path, smollm_shaped, demo)
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in line and "Smollm2 135M 8k" not in line
    blob = tmp_path / "sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa"
    os.symlink(smollm_shaped, blob)  # an ollama blob: the file name says nothing
    line = await _shown(tmp_path, str(blob), demo)
    assert f"{blob.name} (Smollm2 135M 8k Lc100K Mix1 Ep2)" in line


def test_the_metadata_name_is_added_when_it_shares_no_word_with_the_file_name():
    from kvtop.tui.panes.status import model_label

    demo = "Smollm2 135M 8k Lc100K Mix1 Ep2"
    assert model_label("/m/SmolLM2-135M-Instruct.Q4_1.gguf", demo) == ("SmolLM2-135M-Instruct.Q4_1.gguf", None)
    assert model_label("/m/model.gguf", demo) == ("model.gguf", demo)
    assert model_label("/m/gemma-3-270m-it-Q4_K_M.gguf", "Gemma 3 270m It") == ("gemma-3-270m-it-Q4_K_M.gguf", None)
    assert model_label("/m/x.gguf", None) == ("x.gguf", None)
    assert model_label("/m/x.gguf", "[b]a\x1b[31m") == ("x.gguf", "[b]a")  # cleaned, shown as text
