"""Header-only GGUFs (metadata and tensor infos, no tensor data) give the right KV figures."""

import pytest
from gguf_factory import write_header_only

from kvtop.runner.model.facts import facts_from_header
from kvtop.runner.model.gguf_header import GGUFFormatError, check_loadable, read_header
from kvtop.runner.model.quant_types import KV_CACHE_TYPES
from kvtop.runner.physics.kv_bytes import kv_layout

F16, Q4_0 = 1, 2


def facts(path):
    return facts_from_header(read_header(path))


def test_gqa_llama_8b_shape(tmp_path):
    p = write_header_only(tmp_path / "gqa.gguf", "llama", {
        "block_count": 32, "embedding_length": 4096, "attention.head_count": 32,
        "attention.head_count_kv": 8, "context_length": 131072,
    })
    f = facts(p)
    lay = kv_layout(f, 128 * 1024)
    assert lay.bytes_per_token == 128 * 1024
    assert lay.bytes_allocated == 16 * 1024**3
    assert f.n_params is None and f.weights_bytes is None  # no tensor infos: unknown, not guessed
    assert any("unknown" in n for n in f.notes)


def test_mha_defaults_kv_heads_to_heads(tmp_path):
    p = write_header_only(tmp_path / "mha.gguf", "llama", {
        "block_count": 12, "embedding_length": 768, "attention.head_count": 12,
    })
    f = facts(p)
    assert f.layers[0].n_head_kv == 12 and f.layers[0].head_dim_k == 64
    assert kv_layout(f, 1024).bytes_per_token == 2 * 12 * 12 * 64 * 2
    assert any("MHA" in n for n in f.notes)


def test_sliding_window_gemma3_pattern_and_cap(tmp_path):
    p = write_header_only(tmp_path / "swa.gguf", "gemma3", {
        "block_count": 18, "embedding_length": 640, "attention.head_count": 4,
        "attention.head_count_kv": 1, "attention.key_length": 256, "attention.value_length": 256,
        "attention.sliding_window": 512,
    })
    f = facts(p)
    assert f.kinds() == {"sliding": 15, "full": 3}
    assert [i for i, l in enumerate(f.layers) if l.kind == "full"] == [5, 11, 17]
    capped = kv_layout(f, 4096, swa_full=False).by_kind()
    full = kv_layout(f, 4096, swa_full=True).by_kind()
    assert capped["full"].bytes_allocated == 12 * 1024**2
    assert capped["sliding"].cells == 1024  # pad(512 + 512 ubatch, 256)
    assert capped["sliding"].bytes_allocated == 15 * 1024**2
    assert full["sliding"].bytes_allocated == 60 * 1024**2


def test_mla_deepseek_v3_latent_per_token(tmp_path):
    p = write_header_only(tmp_path / "mla.gguf", "deepseek2", {
        "block_count": 61, "embedding_length": 7168, "attention.head_count": 128,
        "attention.head_count_kv": 1, "attention.kv_lora_rank": 512, "rope.dimension_count": 64,
        "attention.key_length": 576, "attention.value_length": 512,
    })
    f = facts(p)
    assert f.kinds() == {"latent": 61}
    lay = kv_layout(f, 4096, type_k="f32")
    assert lay.bytes_per_token == 61 * (512 + 64) * 4  # one latent, no separate V
    assert kv_layout(f, 4096).bytes_per_token / 2 == 61 * (512 + 64)


def test_hybrid_recurrent_layers_have_constant_state(tmp_path):
    heads_kv = [0, 0, 0, 8] * 2  # attention every 4th layer
    p = write_header_only(tmp_path / "hybrid.gguf", "jamba", {
        "block_count": 8, "embedding_length": 4096, "attention.head_count": 32,
        "attention.head_count_kv": heads_kv, "ssm.conv_kernel": 4, "ssm.inner_size": 8192,
        "ssm.state_size": 16, "ssm.time_step_rank": 256,
    })
    f = facts(p)
    assert f.kinds() == {"recurrent": 6, "full": 2}
    small, big = kv_layout(f, 1024).by_kind(), kv_layout(f, 8192).by_kind()
    assert small["recurrent"].bytes_allocated == big["recurrent"].bytes_allocated == 6 * (3 * 8192 + 16 * 8192) * 4
    assert big["full"].bytes_allocated == 8 * small["full"].bytes_allocated
    assert kv_layout(f, 1024).bytes_per_token == 2 * 2 * 8 * 128 * 2  # only attention layers grow


def test_tensor_infos_give_params_and_bytes_without_data(tmp_path):
    p = write_header_only(tmp_path / "t.gguf", "llama", {
        "block_count": 1, "embedding_length": 64, "attention.head_count": 4,
    }, [("token_embd.weight", (1000, 64), F16), ("blk.0.attn_q.weight", (64, 64), Q4_0)])
    h = read_header(p)
    f = facts_from_header(h)
    assert f.n_params == 1000 * 64 + 64 * 64
    assert f.weights_bytes == 1000 * 64 * 2 + 64 * 64 // 32 * 18
    with pytest.raises(GGUFFormatError, match="truncated inside its tensor data"):
        check_loadable(h)


@pytest.mark.parametrize("name,elems_per_block,bytes_per_block", [
    ("f32", 1, 4), ("f16", 1, 2), ("bf16", 1, 2), ("q8_0", 32, 34), ("q4_0", 32, 18),
    ("q4_1", 32, 20), ("iq4_nl", 32, 18), ("q5_0", 32, 22), ("q5_1", 32, 24),
])
def test_every_llama_cpp_cache_type_has_its_block_size(name, elems_per_block, bytes_per_block):
    from kvtop.runner.model.quant_types import row_bytes

    assert row_bytes(KV_CACHE_TYPES[name], 32 * 6) == 6 * 32 // elems_per_block * bytes_per_block
