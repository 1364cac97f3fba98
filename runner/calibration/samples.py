"""A finished turn's measurements as calibration samples.

Each prefill micro-batch is a sample (tokens, depth it started at, seconds): one long
prompt calibrates prefill at several depths. Decode is one sample per turn (intervals
between tokens, the depth in the middle of the reply, seconds). The overhead is what
the time to first token holds beside prefill and the wait for the engine (template,
tokenize, the first sample, the trip to the screen).

Each sample keeps the load it ran at (the cores other processes held, the turn's mean:
``runner.calibration.pace.TurnLoad``; None where it was not seen) and the threads it ran
on (0: not recorded, the engine's own), so the forecast prices it back to quiet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.calibration.store import Samples

if TYPE_CHECKING:
    from kvtop.runner.calibration.pace import TurnLoad
    from kvtop.runner.calibration.store import Sample
    from kvtop.runner.events import TurnMetrics

MIN_DECODE_TOKENS = 4  # fewer intervals say more about the clock than about decode


def samples_from_turn(m: TurnMetrics, load: TurnLoad | None = None) -> Samples:
    """``m``: a ``runner.events.TurnMetrics``; ``load``: what others held while it ran
    (None: not seen)."""
    o = load.others_cores if load is not None else None
    prefill: list[Sample] = []
    depth = m.reused_tokens
    for n, secs in m.ubatches:
        if n > 0 and secs > 0:
            prefill.append((int(n), int(depth), float(secs), o, int(m.n_threads_batch or 0)))
        depth += max(int(n), 0)
    decode: list[Sample] = []
    if m.decode_tokens >= MIN_DECODE_TOKENS and m.decode_s > 0:
        decode.append((m.decode_tokens - 1, m.prompt_tokens + m.decode_tokens // 2, float(m.decode_s), o,
                       int(m.n_threads or 0)))
    overhead = []
    if m.ttft_s is not None and prefill:
        rest = m.ttft_s - m.prefill_s - max(m.wait_s, 0.0)
        if rest >= 0:
            overhead.append(rest)
    return Samples(prefill, decode, overhead, 1 if (prefill or decode) else 0, [o] * len(overhead),
                   n_cores=load.n_cores if load is not None else 0)
