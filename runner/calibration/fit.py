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


@dataclass(frozen=True)
class SplitFit:
    """``seconds = k_matrix * matrix_roofline + k_attention * attention_roofline + c``:
    attention (growing with depth) and the weight matrices reach different shares of
    the peak, most of all on a CPU without flash attention."""

    k_matrix: float
    k_attention: float
    c: float
    n: int

    def seconds(self, matrix_s: float, attention_s: float) -> float:
        return self.k_matrix * matrix_s + self.k_attention * attention_s + self.c


def fit_split(samples: list[tuple[float, float, float]], whole: Fit) -> SplitFit | None:
    """Fit the two efficiencies to [(matrix_s, attention_s, measured_s)] once the samples
    tell them apart: at least two depths (the attention share differs by a third or
    more). Samples more than 50% off the one-efficiency fit ``whole`` (a busy moment) are
    left out first. With three or more samples the fixed cost per micro-batch is fitted
    too (short follow-up prompts are mostly that cost), else it is ``whole``'s. None when
    they cannot be told apart or the fit is not physical."""
    pts = [(m, a, y) for m, a, y in samples if _ok(m) and a >= 0 and _ok(y)]
    pts = [(m, a, y) for m, a, y in pts if 0.5 <= y / whole.seconds(m + a) <= 1.5]
    shares = [a / (m + a) for m, a, _ in pts]
    if len(pts) < 2 or max(shares) - min(shares) < max(shares) / 3:
        return None
    if len(pts) >= 3:  # the fixed cost too, where the samples' sizes tell it apart
        import numpy as np

        (k_m, k_a, c), *_ = np.linalg.lstsq(np.array([[m, a, 1.0] for m, a, _ in pts]),
                                             np.array([y for _, _, y in pts]), rcond=None)
        if k_m > 0 and k_a > 0 and c >= 0:
            return SplitFit(float(k_m), float(k_a), float(c), len(pts))
    c = whole.c
    rest = [(m, a, y - c) for m, a, y in pts]
    # least squares for (k_m, k_a) on what the fixed cost leaves: two equations, two unknowns
    smm = sum(m * m for m, _, _ in rest)
    saa = sum(a * a for _, a, _ in rest)
    sma = sum(m * a for m, a, _ in rest)
    smy = sum(m * y for m, _, y in rest)
    say = sum(a * y for _, a, y in rest)
    det = smm * saa - sma * sma
    if det <= 1e-30 * smm * saa:
        return None
    k_m = (smy * saa - say * sma) / det
    k_a = (say * smm - smy * sma) / det
    if k_m <= 0 or k_a <= 0:
        return None
    return SplitFit(k_m, k_a, c, len(pts))
