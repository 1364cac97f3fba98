"""The roofline of this machine with these settings: one prediction for every caller.

With every layer on one device, ``predict`` on that device's figures; with the model
split (``-ngl`` below the layer count, ``-ts`` across GPUs), each device's share of the
bytes and FLOPs at its own bandwidth and FLOPS (runner.physics.offload). The Estimate
pane, the decode pane's ceiling lines, the TTFT waterfall and the forecast's shape all
ask here, so partial offload is priced the same way everywhere.
"""

from __future__ import annotations

from runner.physics.offload import OffloadSettings, plan
from runner.physics.roofline import Prediction, predict, predict_split


def predict_here(facts, layout, hw, settings, prompt_tokens: int, output_tokens: int = 1,
                 reused_tokens: int = 0) -> Prediction:
    """A turn of ``prompt_tokens`` computed after ``reused_tokens`` cached, then
    ``output_tokens`` decoded (decode priced in the middle of the reply)."""
    depth = reused_tokens + prompt_tokens + output_tokens // 2
    split = plan(facts, layout, hw, OffloadSettings.from_settings(settings), depth=depth,
                 prompt_tokens=prompt_tokens, reused_tokens=reused_tokens)
    if split.shares:
        return predict_split(facts, layout, list(split.shares), prompt_tokens, output_tokens, reused_tokens)
    return predict(facts, layout, hw.bandwidth_gbs, hw.tflops, prompt_tokens=prompt_tokens,
                   output_tokens=output_tokens, reused_tokens=reused_tokens)


def ceilings_here(facts, layout, hw, settings, depth: int) -> tuple[float | None, float | None]:
    """(bandwidth ceiling, compute ceiling) in tok/s for a token decoded at ``depth``."""
    p = predict_here(facts, layout, hw, settings, 1, 1, max(depth - 1, 0))
    return p.decode_ceiling_tok_s, p.compute_ceiling_tok_s


def prefill_seconds_here(facts, layout, hw, settings, tokens: int, depth: int) -> float | None:
    """Seconds to compute ``tokens`` prompt tokens after ``depth`` cached, at the roofline."""
    return predict_here(facts, layout, hw, settings, tokens, 1, depth).prefill_s
