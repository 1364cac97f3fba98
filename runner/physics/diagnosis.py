"""Why was the first token slow? What the waterfall predicts per prefill micro-batch.

The verdicts themselves (``ttft_verdict`` among them) live in ``runner.physics.verdicts``.
"""

from __future__ import annotations

from runner.physics.roofline import attention_flops, flops_per_token


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
