"""The physics of a server that batches without slots (vLLM), from its poll (``BatchView``).

vLLM publishes no per-request depths, only how many requests run and the share of its
KV block pool in use. The batched roof takes the running requests as one batch sharing
those KV tokens evenly: ``B = running`` streams at depth ``KV tokens in use / B``, each
step reading the weights once and every stream's KV (runner.physics.batching).

vLLM can count its own FLOPs and bytes read (``estimated_flops_per_gpu_total``,
``estimated_read_bytes_per_gpu_total``, with ``--enable-mfu-metrics``; otherwise they
stay 0). ``perf_check`` sets kvtop's figures for the requests of the window beside
vLLM's: FLOPs per token (every layer's matrices, the output projection for each token
whose logits are computed, attention at each token's depth: runner.physics.phase_costs)
and bytes per generated token (the weights once per engine step, each decode token's KV
at its depth). The requests are taken as the window's average one (its prompt, prefix
hits and generated tokens over the requests that finished).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kvtop.runner.physics.batching import BatchCeiling, batched_decode_ceiling, compute_tok_s, more_conversations_fit
from kvtop.runner.physics.kv_bytes import kv_bytes_read_at_depth
from kvtop.runner.physics.phase_costs import decode_flops, decode_weight_bytes, layer_attention_flops, prefill_flops

if TYPE_CHECKING:
    from kvtop.runner.physics.here import Here

DISAGREE = 0.10  # kvtop's figure and vLLM's this far apart: said, not hidden


class Batch(Protocol):
    """What the physics reads of a batching server's poll (runner.server.batch_view.BatchView)."""

    @property
    def running(self) -> int | None: ...
    @property
    def kv_usage(self) -> float | None: ...
    @property
    def kv_tokens(self) -> int | None: ...
    @property
    def flops(self) -> float | None: ...
    @property
    def read_bytes(self) -> float | None: ...
    @property
    def deltas(self) -> dict[str, float]: ...
    @property
    def mfu(self) -> str: ...


def batch_physics(here: Here | None, b: Batch) -> tuple[BatchCeiling | None, int | None, float | None]:
    """(the batched ceiling of the requests running now, how many more conversations of
    their average length fit in the pool, that length); the ceiling needs a ``Here``."""
    running = b.running or 0
    used = b.kv_usage * b.kv_tokens if b.kv_usage is not None and b.kv_tokens else None
    avg = used / running if used and running else None
    fit = more_conversations_fit(b.kv_tokens, int(used), avg) if avg and used is not None and b.kv_tokens else None
    if here is None or not here.hw.bandwidth_gbs:
        return None, fit, avg
    weights = decode_weight_bytes(here.facts)
    if not weights:
        return None, fit, avg
    kv = float(kv_bytes_read_at_depth(here.layout, int(avg or 0)))
    return batched_decode_ceiling(here.hw.bandwidth_gbs * 1e9, weights, [kv] * max(running, 1),
                                  compute_tok_s(here.facts, here.hw.tflops)), fit, avg


@dataclass(frozen=True)
class PerfCheck:
    """kvtop's FLOPs and bytes beside vLLM's over the same requests (``line`` says them)."""

    requests: int
    kvtop_flops_per_token: float
    vllm_flops_per_token: float
    kvtop_bytes_per_token: float | None  # None: vLLM's engine steps not published
    vllm_bytes_per_token: float

    @property
    def flops_off(self) -> float:
        return self.kvtop_flops_per_token / self.vllm_flops_per_token - 1

    @property
    def bytes_off(self) -> float | None:
        k = self.kvtop_bytes_per_token
        return k / self.vllm_bytes_per_token - 1 if k is not None and self.vllm_bytes_per_token else None

    @property
    def disagrees(self) -> bool:
        return abs(self.flops_off) > DISAGREE or (self.bytes_off is not None and abs(self.bytes_off) > DISAGREE)


NOT_COUNTED = {"absent": "vLLM publishes no FLOPs or bytes estimate (no estimated_flops_per_gpu_total)",
               "zero": "vLLM's FLOPs and bytes estimates are 0: it counts them only with --enable-mfu-metrics"}


def _request_figures(here: Here, prompt: float, hits: float, gen: float, steps: float | None,
                     requests: int) -> tuple[float, float | None]:
    """kvtop's FLOPs and bytes read for ``requests`` requests like the window's average."""
    facts, layout = here.facts, here.layout
    p, h, g = round(prompt / requests), round(hits / requests), round(gen / requests)
    fed = max(g - 1, 0)  # the first token comes from the prefill, the last one is never fed back
    per_decode = decode_flops(facts) or 0.0
    flops = (prefill_flops(facts, max(p - h, 0), h) or 0.0) + fed * per_decode \
        + sum(layer_attention_flops(facts, fed, p))
    weights = decode_weight_bytes(facts)
    if steps is None or not weights:
        return flops * requests, None
    kv = sum(kv_bytes_read_at_depth(layout, p + i) for i in range(fed))
    return flops * requests, steps * weights + kv * requests


def perf_check(here: Here | None, b: Batch) -> PerfCheck | str | None:
    """kvtop's figures beside vLLM's for the window's requests; a line when vLLM does
    not count them; None while there is nothing to compare (no facts, no finished request)."""
    if b.mfu in NOT_COUNTED:
        return NOT_COUNTED[b.mfu]
    d = b.deltas
    done, gen, prompt = int(d.get("requests_done", 0)), d.get("gen", 0.0), d.get("prompt", 0.0)
    if here is None or b.flops is None or not b.flops or not done or not gen:
        return None
    steps = d.get("steps")
    flops, read = _request_figures(here, prompt, d.get("prefix_hits", 0.0), gen, steps, done)
    tokens = prompt - d.get("prefix_hits", 0.0) + gen
    return PerfCheck(done, flops / max(tokens, 1), b.flops / max(tokens, 1),
                     read / gen if read is not None else None, (b.read_bytes or 0.0) / gen)
