"""The physics: what the hardware should do, from model facts and hardware figures.

Prefill is compute-bound: about 2 x active parameters FLOP per token, plus the
attention term (QK^T and AV grow with the context each token attends to).
Decode is bandwidth-bound: each token reads all active weights and the KV cache at
the current depth, so the ceiling is bandwidth / bytes read. It is also bounded by
compute (FLOPS / 2 x active params); the lower ceiling binds.
All functions are pure so the worked numbers in the reading texts are unit tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from runner.physics.kv_bytes import KVLayout, kv_bytes_read_at_depth
from runner.model.facts import ModelFacts


def flops_per_token(n_params: float) -> float:
    """Dense matmul FLOP per token: one multiply and one add per weight."""
    return 2.0 * n_params


def attention_flops(n_layers: int, n_head: int, head_dim: int, prompt_tokens: int,
                    start: int = 0) -> float:
    """QK^T + AV FLOP for prompt tokens ``start..start+prompt_tokens`` (causal).

    Token t attends to t+1 earlier positions: 2 matmuls x 2 FLOP x heads x head_dim each.
    """
    attended = sum_range(start + 1, start + prompt_tokens)
    return 4.0 * n_layers * n_head * head_dim * attended


def sum_range(a: int, b: int) -> int:
    """a + (a+1) + ... + b."""
    if b < a:
        return 0
    return (a + b) * (b - a + 1) // 2


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

    def to_dict(self) -> dict:
        return asdict(self)


def _attn_term(facts: ModelFacts, prompt_tokens: int, start: int) -> float:
    total = 0.0
    for layer in facts.layers:
        if layer.kind == "recurrent" or not layer.n_head or not layer.head_dim_k:
            continue
        if layer.kind == "sliding" and facts.sliding_window:
            # each token attends to at most the window
            full = attention_flops(1, layer.n_head, layer.head_dim_k, prompt_tokens, start)
            cap = 4.0 * layer.n_head * layer.head_dim_k * facts.sliding_window * prompt_tokens
            total += min(full, cap)
        else:
            total += attention_flops(1, layer.n_head, layer.head_dim_k, prompt_tokens, start)
    return total


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
    params = facts.n_params_active
    weights = facts.weights_bytes_active
    if depth is None:
        depth = reused_tokens + prompt_tokens + output_tokens // 2
    kv_read = kv_bytes_read_at_depth(layout, depth) if layout else None
    bw = bandwidth_gbs * 1e9 if bandwidth_gbs else None
    fl = tflops * 1e12 if tflops else None

    dec = None
    if bw and weights is not None and kv_read is not None:
        dec = decode_ceiling(bw, weights + kv_read)
    comp = compute_ceiling(fl, params) if fl and params else None
    rate, binding = binding_ceiling(dec, comp)

    pre = pre_rate = None
    if fl and params:
        pre = prefill_seconds(params, prompt_tokens, fl, _attn_term(facts, prompt_tokens, reused_tokens))
        pre_rate = prompt_tokens / pre if pre > 0 else None
    resp = response_seconds(pre, output_tokens, rate) if pre is not None and rate else None
    return Prediction(
        bandwidth_gbs=bandwidth_gbs,
        tflops=tflops,
        weights_bytes=weights,
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


def decode_ceilings_at(facts: ModelFacts, layout: KVLayout, bandwidth_gbs: float | None,
                       tflops: float | None, depth: int) -> tuple[float | None, float | None]:
    """(bandwidth ceiling, compute ceiling) in tok/s at a context depth: the live panes' lines."""
    bw = kv = None
    if bandwidth_gbs and facts.weights_bytes_active is not None:
        kv = kv_bytes_read_at_depth(layout, depth)
        bw = decode_ceiling(bandwidth_gbs * 1e9, facts.weights_bytes_active + kv)
    comp = None
    if tflops and facts.n_params_active:
        comp = compute_ceiling(tflops * 1e12, facts.n_params_active)
    return bw, comp
