"""Fit measured times to the roofline's shape: ``seconds = k * roofline_seconds + c``.

The roofline says how the work grows (prefill FLOPs with the prompt and its depth,
decode bytes with the KV read per token); what it cannot know is how much of the peak
this machine reaches for this model (``k``, at least 1 when the roofline is a true
ceiling) and the fixed cost of each step that no FLOP or byte counts (``c``: a kernel
launch, a graph build, the sampler). Both come from this machine's own runs, so one
calibrated turn already moves the forecast from the ideal to what this machine does.

Pure: no I/O, no llama.cpp.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Fit:
    """``seconds = k * roofline + c`` over ``n`` samples."""

    k: float
    c: float
    n: int

    def seconds(self, roofline_s: float) -> float:
        return self.k * roofline_s + self.c


def _ok(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def fit_scale(pairs: list[tuple[float, float]]) -> Fit | None:
    """``seconds = k * roofline + c`` through ``pairs`` = [(roofline_s, measured_s)].

    Robust, because a turn taken while another process held the CPU is a wild point:
    the slope is the median of the pairwise slopes (Theil-Sen) and the intercept the
    median residual. The intercept is kept only when the samples span sizes (the largest
    roofline at least twice the smallest) and both come out non-negative; otherwise the
    fit is the median ratio through the origin, which one sample already gives."""
    pts = [(x, y) for x, y in pairs if _ok(x) and _ok(y)]
    if not pts:
        return None
    xs = [x for x, _ in pts]
    if len(pts) >= 3 and max(xs) >= 2 * min(xs):
        slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1:]
                  if abs(x2 - x1) > 1e-12 * max(x1, x2)]
        if slopes:
            k = statistics.median(slopes)
            c = statistics.median(y - k * x for x, y in pts)
            if k > 0 and c >= 0:
                return Fit(k, c, len(pts))
    return Fit(statistics.median(y / x for x, y in pts), 0.0, len(pts))
