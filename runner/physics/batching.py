"""Many users on one server: batching shares each read of the weights, every
conversation needs its own KV cache (the second half of ../shared/reading).

With B slots decoding at depths d1..dB, one decode step reads the weights once plus
every slot's KV at its depth, and makes one token for each slot:

    aggregate ceiling = B x bandwidth / (weights + sum of KV read at each depth)  tok/s
    per user          = aggregate / B

One user is the special case B = 1: bandwidth / (weights + KV at d). Batching shares
the weight reads, not the arithmetic: every token still costs its FLOPs, so the
aggregate never passes the compute ceiling (FLOPS / FLOPs per token), and a batch that
reaches it is compute-bound. The KV cells a server has left decide how many more
conversations of the current average length fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.runner.model.facts import ModelFacts


@dataclass(frozen=True)
class BatchCeiling:
    slots: int  # conversations decoding together
    step_bytes: float  # bytes one decode step reads
    aggregate_tok_s: float  # tokens per second across all of them
    per_user_tok_s: float
    bound: str = "bandwidth"  # or "compute": the batch's FLOPs, not its reads, set the pace


def batched_decode_ceiling(bandwidth_bytes_s: float, weights_bytes: float,
                           kv_bytes_read: list[float], compute_tok_s: float | None = None) -> BatchCeiling | None:
    """``kv_bytes_read``: for each decoding slot, the KV bytes it reads at its depth;
    ``compute_tok_s``: the compute ceiling (tokens a second the FLOPS allow), if known."""
    b = len(kv_bytes_read)
    if b == 0 or bandwidth_bytes_s <= 0 or weights_bytes <= 0:
        return None
    step = weights_bytes + sum(kv_bytes_read)
    aggregate = b * bandwidth_bytes_s / step
    if compute_tok_s is not None and 0 < compute_tok_s < aggregate:
        return BatchCeiling(b, step, compute_tok_s, compute_tok_s / b, "compute")
    return BatchCeiling(b, step, aggregate, aggregate / b)


@dataclass(frozen=True)
class SpecBatchCeiling:
    """The batched ceiling when every decoding slot speculates: each pass verifies
    ``draft`` drafted tokens plus one for every slot in one batch (the weights and each
    slot's KV read once, ``slots x (draft + 1)`` tokens' FLOPs) and keeps
    ``tokens_per_pass`` tokens a slot (the server's measured acceptance)."""

    slots: int
    draft: int
    tokens_per_pass: float
    pass_s: float
    aggregate_tok_s: float
    bound: str  # "bandwidth" or "compute": what sets a pass's time

    def over_plain(self, plain: BatchCeiling) -> float:
        return self.aggregate_tok_s / plain.aggregate_tok_s if plain.aggregate_tok_s > 0 else 0.0


def speculative_batched_ceiling(plain: BatchCeiling, bandwidth_bytes_s: float, flops_per_token: float | None,
                                tflops_at: Callable[[int], float | None], draft: float,
                                tokens_per_pass: float) -> SpecBatchCeiling | None:
    """``plain``'s slots speculating with drafts of ``draft`` tokens (a mean: the batch
    is the nearest whole size) that yield ``tokens_per_pass`` tokens a slot a pass;
    ``tflops_at(n)``: the FLOPS of a batch of ``n`` tokens (None unknown)."""
    k = max(int(round(draft)), 1)
    if bandwidth_bytes_s <= 0 or tokens_per_pass <= 0 or plain.slots <= 0:
        return None
    read_s = plain.step_bytes / bandwidth_bytes_s
    tokens = plain.slots * (k + 1)
    tf = tflops_at(tokens)
    comp_s = tokens * flops_per_token / (tf * 1e12) if flops_per_token and tf else 0.0
    pass_s, bound = (comp_s, "compute") if comp_s > read_s else (read_s, "bandwidth")
    return SpecBatchCeiling(plain.slots, k, tokens_per_pass, pass_s, plain.slots * tokens_per_pass / pass_s, bound)


def more_conversations_fit(cells_total: int, cells_used: int, average_length: float) -> int | None:
    """How many more conversations of ``average_length`` tokens fit in the cells left."""
    if average_length <= 0 or cells_total <= 0:
        return None
    return max(int((cells_total - cells_used) // average_length), 0)


def compute_tok_s(facts: ModelFacts | None, tflops: float | None) -> float | None:
    """The compute ceiling of decode: FLOPS over the FLOPs one token costs (None unknown)."""
    from kvtop.runner.physics.phase_costs import decode_flops

    flops = decode_flops(facts) if facts is not None else None
    return tflops * 1e12 / flops if tflops and flops else None
