"""A Hugging Face folder's facts (runner/model/hf_config.py) on the folder vLLM's tests serve:
SmolLM2-135M-Instruct converted from the bundled GGUF (tests/data/vllm/smollm2-folder: its
config.json and the header of its model.safetensors, without the weights). The same model
read from its GGUF gives the same shape; only the bytes differ (bfloat16 vs Q4_1)."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

from kvtop.runner.model.hf_config import facts_from_config, kv_bytes_per_token
from kvtop.runner.model.inspect import ModelFileError, load_facts
from kvtop.runner.physics.kv_bytes import kv_layout
from kvtop.runner.physics.phase_costs import decode_flops, decode_weight_bytes

FOLDER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data", "vllm", "smollm2-folder")


def test_the_folder_gives_the_facts_the_gguf_gives(smollm_shaped):
    hf, gguf = load_facts(FOLDER), load_facts(smollm_shaped)
    for key in ("architecture", "n_layers", "n_embd", "n_vocab", "n_ctx_train", "n_params", "n_ff",
                "output_params", "output_tied", "layer_params_active"):
        assert getattr(hf, key) == getattr(gguf, key), key
    assert hf.layers == gguf.layers and hf.layers[0].n_head_kv == 3 and hf.layers[0].head_dim_k == 64
    assert decode_flops(hf) == decode_flops(gguf) == 268_959_744  # 2 x (layers' matrices + the tied output)
    # bfloat16: 2 bytes a parameter, the tied embedding counted once
    assert hf.file_type == "BF16" and hf.weights_bytes == 2 * hf.n_params == 269_030_016
    assert decode_weight_bytes(hf) == hf.weights_bytes and decode_weight_bytes(gguf) < hf.weights_bytes / 2
    assert hf.notes == ["facts from the Hugging Face folder's config.json"]


def test_kv_bytes_per_token_are_the_cache_vllm_allocates():
    facts = facts_from_config(os.path.join(FOLDER, "config.json"))  # the file itself works too
    # 2 (K, V) x 30 layers x 3 KV heads x 64 x 2 bytes; vLLM's idle sample: 364 blocks of
    # 128 tokens in kv_cache_memory_bytes=1073741824
    assert kv_bytes_per_token(facts, 2) == 23_040
    assert 364 * 128 * 23_040 <= 1_073_741_824 < 365 * 128 * 23_040
    assert kv_layout(facts, 4096).bytes_per_token == 23_040  # the physics' own layout agrees


def test_without_safetensors_the_config_shapes_give_the_parameters(tmp_path):
    shutil.copy(os.path.join(FOLDER, "config.json"), tmp_path / "config.json")
    facts = load_facts(str(tmp_path))
    assert facts.n_params == 134_515_008 - 30 * 2 * 576 - 576  # no norms in the shapes
    assert facts.layer_params_active == load_facts(FOLDER).layer_params_active
    assert "config.json's shapes" in facts.notes[-1]


def test_an_moe_config_counts_the_experts_a_token_uses(tmp_path):
    with open(os.path.join(FOLDER, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    cfg.update(num_local_experts=8, num_experts_per_tok=2)
    (tmp_path / "config.json").write_text(json.dumps({"text_config": cfg, "model_type": "wrapper"}))
    facts = load_facts(str(tmp_path))
    assert facts.n_experts == 8 and facts.n_experts_used == 2
    ffn = 3 * 576 * 1536 * 30
    assert facts.n_params - facts.n_params_active == ffn * 6
    assert facts.weights_bytes_active is not None and facts.weights_bytes_active < facts.weights_bytes


def test_a_folder_is_refused_where_kvtop_would_run_it_and_a_bad_header_is_not_read(tmp_path):
    with pytest.raises(ModelFileError, match="Hugging Face model folder"):
        load_facts(FOLDER, need_weights=True)
    shutil.copy(os.path.join(FOLDER, "config.json"), tmp_path / "config.json")
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    assert "config.json's shapes" in load_facts(str(tmp_path)).notes[-1]  # the huge header is never read
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelFileError, match="not a JSON object"):
        load_facts(str(tmp_path))


def _header(path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file's header alone (kvtop never reads past it)."""
    table, at = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for s in shape:
            n *= s
        table[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + 2 * n]}
        at += 2 * n
    raw = json.dumps(table).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_a_multimodal_folders_encoders_are_no_text_tokens_weights(tmp_path):
    text = {"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 4, "vocab_size": 16, "intermediate_size": 12, "max_position_embeddings": 128}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text,
                                                      "dtype": "bfloat16", "tie_word_embeddings": True}))
    _header(tmp_path / "model.safetensors", {
        "model.language_model.embed_tokens.weight": ("BF16", [16, 8]),
        "model.language_model.layers.0.self_attn.q_proj.weight": ("BF16", [8, 8]),
        "model.language_model.layers.0.input_layernorm.weight": ("BF16", [8]),
        "model.vision_tower.encoder.layers.0.mlp.fc1.weight": ("BF16", [32, 8]),
        "model.multi_modal_projector.proj.weight": ("BF16", [8, 8]),
    })
    facts = load_facts(str(tmp_path))
    assert facts.n_layers == 1 and facts.layers[0].n_head_kv == 1 and facts.n_vocab == 16
    assert facts.layer_params_active == [64]  # q_proj; the norm is a vector, the encoder no text layer
    assert facts.layer_bytes == [64 * 2 + 8 * 2] and facts.output_tied and facts.output_params == 128
    assert facts.n_params == 128 + 64 + 8 + 256 + 64  # every tensor is the model's, read per token or not
    assert decode_weight_bytes(facts) == 2 * (64 + 8) + 2 * 128
