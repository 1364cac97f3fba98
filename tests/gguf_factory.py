"""Write GGUF files for tests with the ``gguf`` package's GGUFWriter.

* ``write_header_only``: metadata and tensor infos, no tensor data (what
  ``kvtop estimate`` must handle without weights).
* ``write_tiny_llama``: a 2-layer llama with random weights and SmolLM2's real
  tokenizer, which llama.cpp loads and generates with.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter


def write_header_only(path, arch: str, kv: dict, tensors: list[tuple[str, tuple, int]] = ()) -> str:
    w = GGUFWriter(str(path), arch)
    for key, value in kv.items():
        full = key if key.startswith(("general.", "tokenizer.")) else f"{arch}.{key}"
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, int):
            w.add_uint32(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        elif isinstance(value, str):
            w.add_string(full, value)
        elif isinstance(value, list):
            w.add_array(full, value)
    for name, shape, qtype in tensors:
        from gguf.constants import GGML_QUANT_SIZES

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
        n = int(np.prod(shape))
        w.add_tensor_info(name, shape[::-1], np.dtype(np.float32), n // block * size, raw_dtype=GGMLQuantizationType(qtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return str(path)


def _copy_tokenizer(w: GGUFWriter, source: str) -> None:
    r = GGUFReader(source)
    for name, field in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        if name == "tokenizer.chat_template":
            w.add_chat_template(str(bytes(field.parts[field.data[0]]), "utf-8"))
            continue
        if name == "tokenizer.ggml.model":
            w.add_tokenizer_model(str(bytes(field.parts[field.data[0]]), "utf-8"))
        elif name == "tokenizer.ggml.pre":
            w.add_tokenizer_pre(str(bytes(field.parts[field.data[0]]), "utf-8"))
        elif name == "tokenizer.ggml.tokens":
            w.add_token_list([bytes(field.parts[i]) for i in field.data])
        elif name == "tokenizer.ggml.merges":
            w.add_token_merges([bytes(field.parts[i]) for i in field.data])
        elif name == "tokenizer.ggml.token_type":
            w.add_token_types([int(field.parts[i][0]) for i in field.data])
        elif name.endswith("_token_id"):
            w.add_uint32(name, int(field.parts[field.data[0]][0]))
        elif name.startswith("tokenizer.ggml.add_"):
            w.add_bool(name, bool(field.parts[field.data[0]][0]))


def write_tiny_llama(path, tokenizer_from: str, n_layers: int = 2, n_embd: int = 64,
                     n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128, block_count: int | None = None,
                     name: str = "tiny-llama", seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    r = GGUFReader(tokenizer_from)
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    w = GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(block_count if block_count is not None else n_layers)
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    _copy_tokenizer(w, tokenizer_from)
    hd = n_embd // n_head

    def t(name, *shape, f16=True):
        a = (rng.standard_normal(shape) * 0.02).astype(np.float16 if f16 else np.float32)
        w.add_tensor(name, a)

    t("token_embd.weight", n_vocab, n_embd)
    t("output_norm.weight", n_embd, f16=False)
    for i in range(n_layers):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", n_embd, f16=False)
        t(p + "attn_q.weight", n_head * hd, n_embd)
        t(p + "attn_k.weight", n_head_kv * hd, n_embd)
        t(p + "attn_v.weight", n_head_kv * hd, n_embd)
        t(p + "attn_output.weight", n_embd, n_head * hd)
        t(p + "ffn_norm.weight", n_embd, f16=False)
        t(p + "ffn_gate.weight", n_ff, n_embd)
        t(p + "ffn_up.weight", n_ff, n_embd)
        t(p + "ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
