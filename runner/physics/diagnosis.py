"""Why was the first token slow? Plain-language verdicts from a turn's measured timeline."""

from __future__ import annotations

from runner.physics.roofline import attention_flops, flops_per_token


def _s(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


def predicted_ubatch_seconds(n_params: float | None, tflops: float | None, layers, ubatches, reused: int) -> list:
    """Predicted seconds per prefill micro-batch: 2 x params x tokens + attention, / FLOPS."""
    if not n_params or not tflops:
        return [None] * len(ubatches)
    out = []
    start = reused
    for n, _dt in ubatches:
        attn = 0.0
        for layer in layers:
            if layer.kind != "recurrent" and layer.n_head and layer.head_dim_k:
                attn += attention_flops(1, layer.n_head, layer.head_dim_k, n, start)
        out.append((flops_per_token(n_params) * n + attn) / (tflops * 1e12))
        start += n
    return out


def ttft_verdict(metrics, first_diff_index: int | None = None, diff_context=None) -> str:
    """One sentence naming the biggest cause of this turn's time to first token."""
    ttft = metrics.ttft_s
    if not ttft or not metrics.timeline:
        return "no first token was produced in this turn"
    prefill = sum(dt for _, dt in metrics.ubatches)
    segs = {label: dt for label, _start, dt in metrics.timeline}
    wait = segs.get("wait for engine", 0.0)
    template = segs.get("template", 0.0)
    if prefill >= 0.5 * ttft:
        recomputed = metrics.prefill_tokens
        if first_diff_index is not None and recomputed > metrics.prompt_tokens // 2:
            where = f" (cached …{diff_context[0][-24:]!r} vs new …{diff_context[1][-24:]!r})" if diff_context else ""
            return (f"prompt of {metrics.prompt_tokens:,} tokens, {recomputed:,} recomputed: the prompt differs "
                    f"from the cached one at token {first_diff_index:,}{where}; an unchanged prefix is reused")
        rate = recomputed / prefill if prefill else 0
        return (f"compute-bound: {_s(prefill)} of {_s(ttft)} is prefill of {recomputed:,} tokens at "
                f"{rate:,.0f} tok/s ({metrics.reused_tokens:,} reused from the cache)")
    if wait >= 0.5 * ttft:
        return f"queued: {_s(wait)} of {_s(ttft)} waiting for the engine (model load or a previous turn)"
    if template >= 0.3 * ttft:
        return f"template rendering took {_s(template)} of {_s(ttft)}"
    biggest = max(metrics.timeline, key=lambda seg: seg[2])
    return f"{biggest[0]} is the largest part: {_s(biggest[2])} of {_s(ttft)}"
