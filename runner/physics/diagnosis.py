"""Why was the first token slow? What the waterfall predicts per prefill micro-batch.

The verdicts themselves (``ttft_verdict`` among them) live in ``runner.physics.verdicts``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def predicted_ubatch_seconds(prefill_s: Callable[[int, int], float | None] | None,
                             ubatches: Sequence[tuple[int, float]], reused: int) -> list[float | None]:
    """Predicted seconds per prefill micro-batch: ``prefill_s(tokens, depth)`` (the
    machine's roofline, runner.physics.machine.prefill_seconds_here) for each one, at
    the depth it started from."""
    if prefill_s is None:
        return [None] * len(ubatches)
    out: list[float | None] = []
    start = reused
    for n, _dt in ubatches:
        out.append(prefill_s(n, start) if n > 0 else None)
        start += max(n, 0)
    return out
