"""The KV estimate equals the KV buffers llama.cpp itself allocates, read from its log."""

import pytest

from kvtop.runner.engine.engine import Engine
from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.kv_bytes import kv_layout
from kvtop.runner.settings import Settings

MiB = 1024 * 1024


def allocated(path, **kw):
    e = Engine(Settings(path, **kw), lambda ev: None)
    try:
        return e.load()
    finally:
        e.close()


def check(path, n_ctx, ctk, swa_full):
    fa = "off" if ctk == "f16" else "on"  # a quantised V cache needs flash attention
    loaded = allocated(path, n_ctx=n_ctx, cache_type_k=ctk, cache_type_v=ctk, flash_attn=fa, swa_full=swa_full)
    lay = kv_layout(load_facts(path), n_ctx, ctk, ctk, swa_full, loaded.n_ubatch)
    lines = {line.kind: line for line in loaded.buffers.kv}
    kinds = lay.by_kind()
    assert set(lines) == set(kinds)
    for kind, k in kinds.items():
        line = lines[kind]
        assert (line.cells, line.layers) == (k.cells, k.n_layers)
        assert line.type_k == ctk and line.type_v == ctk
        # llama.cpp prints MiB with two decimals: ours must print the same
        assert f"{k.bytes_allocated / MiB:.2f}" == f"{line.mib:.2f}"
    return lay, loaded


@pytest.mark.parametrize("ctk", ["f16", "q8_0", "q4_0"])
def test_smollm2_kv_buffer(smollm_path, ctk):
    lay, loaded = check(smollm_path, 2048, ctk, False)
    if ctk == "f16":
        assert lay.bytes_allocated == 45 * MiB
        assert lay.bytes_per_token == 22.5 * 1024
        assert loaded.buffers.kv_mib == 45.0


@pytest.mark.parametrize("ctk", ["f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("swa_full", [True, False])
def test_gemma3_sliding_window_kv_buffers(gemma_path, ctk, swa_full):
    lay, _ = check(gemma_path, 4096, ctk, swa_full)
    k = lay.by_kind()
    if ctk == "f16":
        assert k["full"].bytes_allocated == 12 * MiB
        assert k["sliding"].bytes_allocated == (60 if swa_full else 15) * MiB


def test_weights_bytes_match_llama_cpp_model_buffer(smollm_path):
    loaded = allocated(smollm_path, n_ctx=512)
    facts = load_facts(smollm_path)
    assert f"{facts.weights_bytes / MiB:.2f}" == f"{loaded.buffers.weights_mib:.2f}"


@pytest.mark.parametrize("mmap,mlock", [(True, False), (False, False)])
def test_no_mmap_reaches_llama_cpp(smollm_path, mmap, mlock):
    """--no-mmap did nothing: llama-cpp-python 0.3.36's llama.cpp took ``load_mode`` in
    place of ``use_mmap``, and setting the old name on the struct was silently ignored.
    llama.cpp's log says which it did ("CPU_Mapped model buffer" or "CPU model buffer")."""
    loaded = allocated(smollm_path, n_ctx=512, mmap=mmap, mlock=mlock)
    assert loaded.buffers.weights_mapped is mmap
