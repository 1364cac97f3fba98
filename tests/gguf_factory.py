"""Write GGUF files for tests with the ``gguf`` package's GGUFWriter.

* ``write_header_only``: metadata and tensor infos, no tensor data (what
  ``kvtop estimate`` must handle without weights).
* ``write_tiny_llama``: a 2-layer llama with random weights and SmolLM2's real
  tokenizer, which llama.cpp loads and generates with.
"""

from __future__ import annotations

import functools
import struct

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


@functools.lru_cache(maxsize=4)
def _tokenizer_fields(source: str) -> tuple:
    """The tokenizer's fields of ``source`` as plain values, read once per process: gguf's
    reader takes ~10 s (a minute on a busy machine) to walk SmolLM2's 49,152 tokens and
    48,900 merges, and several tests write tiny models with that tokenizer."""
    r = GGUFReader(source)
    out = []
    for name, field in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        if name in ("tokenizer.chat_template", "tokenizer.ggml.model", "tokenizer.ggml.pre"):
            out.append((name, str(bytes(field.parts[field.data[0]]), "utf-8")))
        elif name in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            out.append((name, tuple(bytes(field.parts[i]) for i in field.data)))
        elif name == "tokenizer.ggml.token_type":
            out.append((name, tuple(int(field.parts[i][0]) for i in field.data)))
        elif name.endswith("_token_id"):
            out.append((name, int(field.parts[field.data[0]][0])))
        elif name.startswith("tokenizer.ggml.add_"):
            out.append((name, bool(field.parts[field.data[0]][0])))
    return tuple(out)


# A vocabulary for files that are never loaded (header checks): no source to read.
NO_TOKENIZER = (("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.tokens", (b"a", b"b", b"c", b"d")),
                ("tokenizer.ggml.merges", ()), ("tokenizer.ggml.token_type", (1, 1, 1, 1)))


def _copy_tokenizer(w: GGUFWriter, fields: tuple) -> None:
    add = {"tokenizer.chat_template": w.add_chat_template, "tokenizer.ggml.model": w.add_tokenizer_model,
           "tokenizer.ggml.pre": w.add_tokenizer_pre, "tokenizer.ggml.tokens": lambda v: w.add_token_list(list(v)),
           "tokenizer.ggml.merges": lambda v: w.add_token_merges(list(v)),
           "tokenizer.ggml.token_type": lambda v: w.add_token_types(list(v))}
    for name, value in fields:
        if name in add:
            add[name](value)
        elif name.endswith("_token_id"):
            w.add_uint32(name, value)
        else:
            w.add_bool(name, value)


def write_tiny_llama(path, tokenizer_from: str | None, n_layers: int = 2, n_embd: int = 64,
                     n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128, block_count: int | None = None,
                     name: str = "tiny-llama", seed: int = 0) -> str:
    """A random-weight llama with ``tokenizer_from``'s tokenizer (None: a 4-token one, for
    files only headers are read from)."""
    rng = np.random.default_rng(seed)
    fields = _tokenizer_fields(tokenizer_from) if tokenizer_from else NO_TOKENIZER
    n_vocab = len(dict(fields)["tokenizer.ggml.tokens"])
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
    _copy_tokenizer(w, fields)
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


SMOLLM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def write_smollm_shape(path) -> str:
    """A GGUF with SmolLM2-135M-Instruct Q4_1's metadata and tensor list, and no weights.

    The tensor data is a hole (the file is truncated to its full length, so it is
    sparse on disk): ``load_facts(need_weights=True)`` accepts it and reports the
    same facts as the real file (a test compares them), so UI tests on the scripted
    engine show the demo model's numbers without the demo package. llama.cpp would
    read zeros: never load it."""
    q8, q4_1, f32 = GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.F32
    kv = {
        "general.name": "Smollm2 135M 8k Lc100K Mix1 Ep2", "general.file_type": 3,
        "block_count": 30, "context_length": 8192, "embedding_length": 576,
        "feed_forward_length": 1536, "attention.head_count": 9, "attention.head_count_kv": 3,
        "rope.freq_base": 100000.0, "attention.layer_norm_rms_epsilon": 1e-5,
        "vocab_size": 49152, "rope.dimension_count": 64,
        "tokenizer.ggml.model": "gpt2", "tokenizer.chat_template": SMOLLM_TEMPLATE,
    }
    tensors = [("token_embd.weight", (49152, 576), q8)]
    for i in range(30):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (576,), f32), (b + "ffn_norm.weight", (576,), f32),
                    (b + "ffn_down.weight", (576, 1536), q4_1), (b + "ffn_gate.weight", (1536, 576), q4_1),
                    (b + "ffn_up.weight", (1536, 576), q4_1), (b + "attn_k.weight", (192, 576), q4_1),
                    (b + "attn_output.weight", (576, 576), q4_1), (b + "attn_q.weight", (576, 576), q4_1),
                    (b + "attn_v.weight", (192, 576), q4_1)]
    tensors.append(("output_norm.weight", (576,), f32))
    write_header_only(path, "llama", kv, tensors)
    from kvtop.runner.model.gguf_header import read_header

    header = read_header(path)
    with open(path, "r+b") as fh:
        fh.truncate(header.data_offset + header.tensor_data_bytes())
    return str(path)


def gguf_bytes(version=3, n_tensors=0, n_kv=0, body=b""):
    """A GGUF preamble with the given counts and raw bytes after it."""
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + body


def make_bad_files(tmp_path, smollm_path) -> dict[str, tuple[str, str]]:
    """Malformed model files, each with the reason kvtop must give: {name: (path, reason)}."""
    cases = {}
    cases["missing"] = (str(tmp_path / "nope.gguf"), "no such file")
    d = tmp_path / "adir.gguf"
    d.mkdir()
    cases["directory"] = (str(d), "is a directory")
    for name, data, reason in [
        ("empty", b"", "is empty"),
        ("text", b"hello, I am a text file\n" * 10, "is not a GGUF file"),
        ("random", bytes(range(256)) * 4, "is not a GGUF file"),
        ("wrong_magic", b"GGML" + b"\x00" * 60, "is not a GGUF file"),
        ("wrong_version", gguf_bytes(version=99), "unsupported GGUF version 99"),
        ("absurd_tensors", gguf_bytes(n_tensors=2**62), "absurd tensor count"),
        ("absurd_kv", gguf_bytes(n_kv=2**62), "absurd metadata count"),
        ("truncated_metadata", gguf_bytes(n_kv=3, body=struct.pack("<Q", 10) + b"general.ar"), "truncated inside its metadata"),
    ]:
        p = tmp_path / f"{name}.gguf"
        p.write_bytes(data)
        cases[name] = (str(p), reason)
    with open(smollm_path, "rb") as src:
        data = src.read()
    p = tmp_path / "truncated_data.gguf"
    p.write_bytes(data[: len(data) // 2])
    cases["truncated_data"] = (str(p), "truncated inside its tensor data")
    cases["unknown_arch"] = (write_header_only(tmp_path / "arch.gguf", "nonsense", {"block_count": 2}),
                             "unknown model architecture")
    return cases


def write_tiny_lora(path, n_layers: int = 2, n_embd: int = 64, n_ff: int = 128, rank: int = 4,
                    arch: str = "llama", seed: int = 1, scale: float = 1.0) -> str:
    """A LoRA adapter for ``write_tiny_llama``'s model (attn_q, attn_output and ffn_down of
    every layer: the last two write to the residual stream, so greedy picks change), in the
    GGUF form llama.cpp's llama_adapter_lora_init reads (general.type adapter, adapter.type
    lora, lora_a/lora_b pairs with A as [n_embd, r] and B as [r, n_out] in ggml's order)."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(rank))
    for i in range(n_layers):
        for name, n_in, n_out in (("attn_q", n_embd, n_embd), ("attn_output", n_embd, n_embd),
                                  ("ffn_down", n_ff, n_embd)):
            a = (rng.standard_normal((rank, n_in)) * scale).astype(np.float32)
            b = (rng.standard_normal((n_out, rank)) * scale).astype(np.float32)
            w.add_tensor(f"blk.{i}.{name}.weight.lora_a", a)
            w.add_tensor(f"blk.{i}.{name}.weight.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
