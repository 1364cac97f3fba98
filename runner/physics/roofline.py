"""The physics: what the hardware should do, from model facts and hardware figures.

Prefill is compute-bound: about 2 FLOP per weight a token is multiplied by, plus the
attention term (QK^T and AV grow with the context each token attends to); which
weights a token is multiplied by, and which it only reads, is
runner.physics.phase_costs. Decode is bandwidth-bound: each token reads the weights
it uses and the KV cache at the current depth, so the ceiling is bandwidth / bytes
read. It is also bounded by compute (FLOPS / FLOP per token); the lower ceiling binds.
A model split across devices adds each device's time (runner.physics.device_split).
All functions are pure so the worked numbers in the reading texts are unit tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.device_split import DeviceShare, decode_compute_seconds, decode_seconds, prefill_seconds_on
from kvtop.runner.physics.kv_bytes import KVLayout, kv_bytes_read_at_depth
from kvtop.runner.physics.phase_costs import (  # noqa: F401
    attention_flops,
    decode_flops,
    decode_weight_bytes,
    prefill_flops,
    sum_range,
)


def flops_per_token(n_params: float) -> float:
    """Dense matmul FLOP per token: one multiply and one add per weight."""
    return 2.0 * n_params


def prefill_seconds(n_params: float, prompt_tokens: int, flops: float,
                    attn_flops: float = 0.0) -> float:
    return (flops_per_token(n_params) * prompt_tokens + attn_flops) / flops


def decode_ceiling(bandwidth_bytes_s: float, bytes_per_token: float) -> float:
    """Tokens/s when each token must read ``bytes_per_token`` from memory."""
    return bandwidth_bytes_s / bytes_per_token


def compute_ceiling(flops: float, n_params: float) -> float:
    return flops / flops_per_token(n_params)


def binding_ceiling(bandwidth_tok_s: float | None,
                    compute_tok_s: float | None) -> tuple[float | None, str | None]:
    """(the ceiling that binds, "bandwidth" or "compute"): the lower one; a ceiling that
    cannot be known (None) never binds. (None, None) when neither is known.

    The one place this rule lives: ``predict``, the estimate rows and the decode pane
    all ask here."""
    if bandwidth_tok_s is not None and (compute_tok_s is None or bandwidth_tok_s <= compute_tok_s):
        return bandwidth_tok_s, "bandwidth"
    if compute_tok_s is not None:
        return compute_tok_s, "compute"
    return None, None


def response_seconds(ttft_s: float, output_tokens: int, decode_tok_s: float) -> float:
    return ttft_s + output_tokens / decode_tok_s


def conversations_that_fit(free_bytes: float, kv_bytes_per_conversation: float) -> int:
    return int(free_bytes // kv_bytes_per_conversation)


@dataclass(frozen=True)
class Prediction:
    """Everything the estimate-vs-actual panel and ``kvtop estimate`` show.

    ``None`` marks a figure that cannot be known from the inputs given.
    """

    bandwidth_gbs: float | None
    tflops: float | None
    weights_bytes: int | None
    kv_bytes_per_token: float | None
    kv_bytes: int | None
    prompt_tokens: int
    output_tokens: int
    decode_ceiling_tok_s: float | None
    compute_ceiling_tok_s: float | None
    binding: str | None  # "bandwidth" or "compute"
    prefill_s: float | None
    prefill_tok_s: float | None
    ttft_s: float | None
    response_s: float | None

    @property
    def decode_tok_s(self) -> float | None:
        """The predicted decode rate: the ceiling that binds."""
        return binding_ceiling(self.decode_ceiling_tok_s, self.compute_ceiling_tok_s)[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def predict(
    facts: ModelFacts,
    layout: KVLayout | None,
    bandwidth_gbs: float | None,
    tflops: float | None,
    prompt_tokens: int = 512,
    output_tokens: int = 128,
    depth: int | None = None,
    reused_tokens: int = 0,
) -> Prediction:
    """Predict a turn: ``prompt_tokens`` to prefill (after ``reused_tokens`` cached)
    then ``output_tokens`` to decode, decode measured at ``depth`` (default: the
    middle of the answer)."""
    weights = decode_weight_bytes(facts)
    if depth is None:
        depth = reused_tokens + prompt_tokens + output_tokens // 2
    kv_read = kv_bytes_read_at_depth(layout, depth) if layout else None
    bw = bandwidth_gbs * 1e9 if bandwidth_gbs else None
    fl = tflops * 1e12 if tflops else None

    dec = None
    if bw and weights is not None and kv_read is not None:
        dec = decode_ceiling(bw, weights + kv_read)
    per_token = decode_flops(facts)
    comp = fl / per_token if fl and per_token else None
    work = prefill_flops(facts, prompt_tokens, reused_tokens)
    pre = work / fl if fl and work is not None else None
    return _prediction(facts, layout, bandwidth_gbs, tflops, prompt_tokens, output_tokens, dec, comp, pre)


def _prediction(facts: ModelFacts, layout: KVLayout | None, bandwidth_gbs: float | None, tflops: float | None,
                prompt_tokens: int, output_tokens: int, dec: float | None, comp: float | None,
                pre: float | None) -> Prediction:
    rate, binding = binding_ceiling(dec, comp)
    pre_rate = prompt_tokens / pre if pre else None
    resp = response_seconds(pre, output_tokens, rate) if pre is not None and rate else None
    return Prediction(
        bandwidth_gbs=bandwidth_gbs,
        tflops=tflops,
        weights_bytes=facts.weights_bytes_active,
        kv_bytes_per_token=layout.bytes_per_token if layout else None,
        kv_bytes=layout.bytes_allocated if layout else None,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        decode_ceiling_tok_s=dec,
        compute_ceiling_tok_s=comp,
        binding=binding,
        prefill_s=pre,
        prefill_tok_s=pre_rate,
        ttft_s=pre,
        response_s=resp,
    )


def predict_split(facts: ModelFacts, layout: KVLayout, shares: list[DeviceShare], prompt_tokens: int = 512,
                  output_tokens: int = 128, reused_tokens: int = 0) -> Prediction:
    """``predict`` for a model split across devices: ``shares`` from
    runner.physics.device_split at the decode depth and for this prompt. Each phase takes
    the sum over devices of its work there / that device's rate; the figures reported as
    bandwidth and FLOPS are the effective ones (everything read / the time it takes).
    On one device it is ``predict`` itself."""
    working = [s for s in shares if s.read_bytes or s.prefill_flops]
    if len(working) == 1:
        d = working[0].device
        return predict(facts, layout, d.bandwidth_gbs, d.tflops, prompt_tokens, output_tokens,
                       reused_tokens=reused_tokens)
    t_dec, t_comp, pre = decode_seconds(shares), decode_compute_seconds(shares), prefill_seconds_on(shares)
    read = sum(s.read_bytes for s in shares)
    flops = sum(s.decode_flops for s in shares)
    bw = read / t_dec / 1e9 if t_dec else None
    tf = flops / t_comp / 1e12 if t_comp else None
    return _prediction(facts, layout, bw, tf, prompt_tokens, output_tokens,
                       1 / t_dec if t_dec else None, 1 / t_comp if t_comp else None, pre)


def decode_ceilings_at(facts: ModelFacts, layout: KVLayout, bandwidth_gbs: float | None,
                       tflops: float | None, depth: int) -> tuple[float | None, float | None]:
    """(bandwidth ceiling, compute ceiling) in tok/s at a context depth: the live panes' lines."""
    bw = None
    weights = decode_weight_bytes(facts)
    if bandwidth_gbs and weights is not None:
        bw = decode_ceiling(bandwidth_gbs * 1e9, weights + kv_bytes_read_at_depth(layout, depth))
    per_token = decode_flops(facts)
    comp = tflops * 1e12 / per_token if tflops and per_token else None
    return bw, comp
