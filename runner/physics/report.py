"""``kvtop estimate``: model facts + KV layout + hardware profile -> predictions.

Also the pre-flight memory check the UI and ``bench`` run before loading a model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runner.physics.roofline import Prediction, predict
from runner.model.gguf_header import GGUFFormatError, read_header
from runner.system.hardware import HardwareProfile
from runner.physics.kv_bytes import KVLayout, kv_layout
from runner.model.facts import ModelFacts, facts_from_header

# llama.cpp's compute buffer is not in the file; this is a floor for the warning only.
COMPUTE_BUFFER_GUESS = 128 * 1024 * 1024


class ModelFileError(Exception):
    """A one-line reason why a model file cannot be used."""


def load_facts(path: str) -> ModelFacts:
    try:
        header = read_header(path)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such file") from None
    except (OSError, GGUFFormatError) as exc:
        raise ModelFileError(f"{path}: {exc}") from None
    facts = facts_from_header(header)
    check_consistent(facts, header)
    if header.tensors and not header.has_tensor_data:
        facts.notes.append(
            f"tensor data missing or truncated ({header.file_size:,} of "
            f"{header.data_offset + header.tensor_data_bytes():,} bytes): estimate from the header only")
    return facts


def check_consistent(facts: ModelFacts, header) -> None:
    """Refuse metadata that contradicts the tensors (it would trip llama.cpp asserts)."""
    if facts.n_layers is None:
        return
    if facts.n_layers <= 0 or facts.n_layers > 4096:
        raise ModelFileError(f"{facts.path}: absurd block_count {facts.n_layers}")
    blocks = {int(m.group(1)) for t in header.tensors if (m := re.match(r"blk\.(\d+)\.", t.name))}
    if blocks and max(blocks) + 1 != facts.n_layers:
        raise ModelFileError(
            f"{facts.path}: block_count says {facts.n_layers} layers but the tensors "
            f"describe {max(blocks) + 1}"
        )


@dataclass(frozen=True)
class MemoryCheck:
    needed: int | None
    available: int | None
    where: str
    fits: bool | None
    message: str


def memory_check(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, n_gpu_layers: int) -> MemoryCheck:
    where = "VRAM" if n_gpu_layers != 0 and hw.gpus else "RAM"
    if facts.weights_bytes is None:
        return MemoryCheck(None, hw.memory_free, where, None, "weight bytes unknown")
    needed = facts.weights_bytes + layout.bytes_allocated + COMPUTE_BUFFER_GUESS
    avail = hw.memory_free
    if avail is None:
        return MemoryCheck(needed, None, where, None, f"free {where} unknown")
    fits = needed <= avail
    msg = (f"needs about {needed / 2**30:.2f} GiB (weights {facts.weights_bytes / 2**30:.2f} + "
           f"KV {layout.bytes_allocated / 2**30:.2f} + compute ~{COMPUTE_BUFFER_GUESS / 2**30:.2f}) "
           f"with {avail / 2**30:.2f} GiB {where} free")
    return MemoryCheck(needed, avail, where, fits, msg)


def estimate_report(
    facts: ModelFacts,
    hw: HardwareProfile,
    n_ctx: int,
    type_k: str = "f16",
    type_v: str = "f16",
    swa_full: bool = False,
    n_ubatch: int = 512,
    prompt_tokens: int = 512,
    output_tokens: int = 128,
    n_gpu_layers: int = 0,
    conversation_tokens: int = 4000,
) -> dict:
    layout = kv_layout(facts, n_ctx, type_k, type_v, swa_full, n_ubatch)
    pred: Prediction = predict(facts, layout, hw.bandwidth_gbs, hw.tflops, prompt_tokens, output_tokens)
    full_ctx = None
    if facts.n_ctx_train:
        full_ctx = kv_layout(facts, facts.n_ctx_train, type_k, type_v, swa_full, n_ubatch).bytes_allocated
    conv = kv_layout(facts, conversation_tokens, type_k, type_v, swa_full, n_ubatch)
    conv_bytes = conv.bytes_used(conversation_tokens)
    fit = None
    if hw.memory_free is not None and facts.weights_bytes is not None and conv_bytes:
        fit = max(0, int((hw.memory_free - facts.weights_bytes) // conv_bytes))
    mem = memory_check(facts, layout, hw, n_gpu_layers)
    return {
        "model": facts.path,
        "name": facts.name,
        "architecture": facts.architecture,
        "file_type": facts.file_type,
        "n_layers": facts.n_layers,
        "layer_kinds": facts.kinds(),
        "sliding_window": facts.sliding_window,
        "n_params": facts.n_params,
        "n_params_active": facts.n_params_active,
        "weights_bytes": facts.weights_bytes,
        "weights_bytes_active": facts.weights_bytes_active,
        "n_ctx": layout.n_ctx,
        "n_ctx_train": facts.n_ctx_train,
        "cache_type_k": type_k,
        "cache_type_v": type_v,
        "swa_full": swa_full,
        "kv_bytes_per_token": layout.bytes_per_token if facts.layers else None,
        "kv_bytes": layout.bytes_allocated if facts.layers else None,
        "kv_by_kind": {k.kind: {"layers": k.n_layers, "cells": k.cells,
                                "bytes_per_token": k.bytes_per_token,
                                "bytes": k.bytes_allocated} for k in layout.kinds},
        "kv_bytes_full_context": full_ctx,
        "kv_layers_unknown": layout.unknown_layers,
        "conversations_that_fit": fit,
        "conversation_tokens": conversation_tokens,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "decode_ceiling_tok_s": pred.decode_ceiling_tok_s,
        "compute_ceiling_tok_s": pred.compute_ceiling_tok_s,
        "binding": pred.binding,
        "prefill_s": pred.prefill_s,
        "prefill_tok_s": pred.prefill_tok_s,
        "ttft_s": pred.ttft_s,
        "response_s": pred.response_s,
        "bandwidth_gbs": hw.bandwidth_gbs,
        "tflops": hw.tflops,
        "hardware_source": hw.source,
        "memory_needed_bytes": mem.needed,
        "memory_free_bytes": mem.available,
        "memory_fits": mem.fits,
        "memory_message": mem.message,
        "notes": list(facts.notes),
    }


def _fmt_bytes(n) -> str:
    if n is None:
        return "unknown"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.2f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return f"{n}"


def _fmt(v, spec: str = ",.1f", unit: str = "") -> str:
    if v is None:
        return "unknown"
    return f"{v:{spec}}{unit}"


def format_report(r: dict) -> str:
    rows = [
        ("model", r["name"] or r["model"]),
        ("architecture", f"{r['architecture'] or 'unknown'} ({r['file_type'] or '?'})"),
        ("layers", f"{r['n_layers']} " + ", ".join(f"{v} {k}" for k, v in r["layer_kinds"].items())),
        ("parameters", _fmt(r["n_params"], ",d") + (
            f" ({r['n_params_active']:,} active)" if r["n_params_active"] not in (None, r["n_params"]) else "")),
        ("weights", _fmt_bytes(r["weights_bytes"])),
        ("KV per token", _fmt_bytes(r["kv_bytes_per_token"]) + f" ({r['cache_type_k']}/{r['cache_type_v']})"),
        ("KV at n_ctx", f"{_fmt_bytes(r['kv_bytes'])} at {r['n_ctx']:,} tokens"
                        + (" (sliding layers full size)" if r["swa_full"] else "")),
    ]
    for kind, k in r["kv_by_kind"].items():
        rows.append((f"  {kind}", f"{k['layers']} layers x {k['cells']:,} cells = {_fmt_bytes(k['bytes'])}"))
    if r["n_ctx_train"]:
        rows.append(("KV at trained ctx", f"{_fmt_bytes(r['kv_bytes_full_context'])} at {r['n_ctx_train']:,} tokens"))
    rows += [
        ("hardware", f"{_fmt(r['bandwidth_gbs'], ',.1f', ' GB/s')}, {_fmt(r['tflops'], ',.3f', ' TFLOPS')} "
                     f"({r['hardware_source']})"),
        ("decode ceiling", f"{_fmt(r['decode_ceiling_tok_s'], ',.1f', ' tok/s')} (bandwidth)"),
        ("compute ceiling", f"{_fmt(r['compute_ceiling_tok_s'], ',.1f', ' tok/s')}"
                            + (f"  -> {r['binding']}-bound" if r["binding"] else "")),
        (f"prefill {r['prompt_tokens']} tok", f"{_fmt(r['prefill_s'], ',.3f', ' s')} "
                                              f"({_fmt(r['prefill_tok_s'], ',.0f', ' tok/s')})"),
        (f"response +{r['output_tokens']} tok", _fmt(r["response_s"], ",.2f", " s")),
        (f"conversations of {r['conversation_tokens']:,}", _fmt(r["conversations_that_fit"], ",d")
            + " fit beside the weights"),
        ("memory", r["memory_message"] + ("" if r["memory_fits"] is not False else "  (DOES NOT FIT)")),
    ]
    width = max(len(k) for k, _ in rows)
    out = [f"{k:<{width}}  {v}" for k, v in rows]
    out += [f"note: {n}" for n in r["notes"]]
    return "\n".join(out)
