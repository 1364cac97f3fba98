"""The estimate pane's rows: predicted beside measured (until runner.physics owns it)."""

from __future__ import annotations

from runner.physics.roofline import predict

MIB = 2**20


def estimate_rows(f, lay, hw, settings, loaded, mt, peak_rss):
    rows: dict = {}
    buffers = loaded.buffers if loaded else None
    rows["kv"] = (lay.bytes_allocated, buffers.kv_mib * MIB if buffers else None)
    rows["weights"] = (f.weights_bytes, buffers.weights_mib * MIB if buffers else None)
    peak_pred = None
    if f.weights_bytes is not None:
        peak_pred = f.weights_bytes + lay.bytes_allocated + (buffers.compute_total_mib * MIB if buffers else 0)
    # Measured peak only once a turn ran: at load, llama.cpp's mmap-ed weights are not
    # paged in yet and the engine's RSS is a fraction of what a turn needs.
    rows["peak"] = (peak_pred, peak_rss)
    s = settings
    ctx = {
        "gpu_present": bool(hw.gpus), "n_gpu_layers": s.n_gpu_layers,
        "n_ubatch": s.n_ubatch, "on_cpu": not (hw.gpus and s.n_gpu_layers),
        "kv_quantised": s.cache_type_k not in ("f16", "f32", "bf16") or s.cache_type_v not in ("f16", "f32", "bf16"),
        "kv_types": f"{s.cache_type_k}/{s.cache_type_v}",
        "weights_bytes": f.weights_bytes,
    }
    note = f"hardware: {hw.source}"
    if mt is not None:
        p = predict(f, lay, hw.bandwidth_gbs, hw.tflops, prompt_tokens=max(mt.prefill_tokens, 1),
                    output_tokens=mt.decode_tokens, reused_tokens=mt.reused_tokens)
        ttft_pred = (p.prefill_s or 0) + mt.template_s + mt.tokenize_s if p.prefill_s is not None else None
        rows["ttft"] = (ttft_pred, mt.ttft_s)
        rows["prefill"] = (p.prefill_tok_s, mt.prefill_tok_s)
        dec_pred = min(x for x in (p.decode_ceiling_tok_s, p.compute_ceiling_tok_s) if x is not None) \
            if (p.decode_ceiling_tok_s or p.compute_ceiling_tok_s) else None
        rows["decode"] = (dec_pred, mt.decode_tok_s)
        ctx["prompt_tokens"] = mt.prefill_tokens
    return rows, ctx, note
