"""Many users on one server: batching shares each read of the weights, every
conversation needs its own KV cache (the second half of ../shared/reading).

With B slots decoding at depths d1..dB, one decode step reads the weights once plus
every slot's KV at its depth, and makes one token for each slot:

    aggregate ceiling = B x bandwidth / (weights + sum of KV read at each depth)  tok/s
    per user          = aggregate / B

One user is the special case B = 1: bandwidth / (weights + KV at d). The KV cells a
server has left decide how many more conversations of the current average length fit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchCeiling:
    slots: int  # conversations decoding together
    step_bytes: float  # bytes one decode step reads
    aggregate_tok_s: float  # tokens per second across all of them
    per_user_tok_s: float


def batched_decode_ceiling(bandwidth_bytes_s: float, weights_bytes: float,
                           kv_bytes_read: list[float]) -> BatchCeiling | None:
    """``kv_bytes_read``: for each decoding slot, the KV bytes it reads at its depth."""
    b = len(kv_bytes_read)
    if b == 0 or bandwidth_bytes_s <= 0 or weights_bytes <= 0:
        return None
    step = weights_bytes + sum(kv_bytes_read)
    aggregate = b * bandwidth_bytes_s / step
    return BatchCeiling(b, step, aggregate, aggregate / b)


def more_conversations_fit(cells_total: int, cells_used: int, average_length: float) -> int | None:
    """How many more conversations of ``average_length`` tokens fit in the cells left."""
    if average_length <= 0 or cells_total <= 0:
        return None
    return max(int((cells_total - cells_used) // average_length), 0)
