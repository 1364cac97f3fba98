"""How often the dashboard redraws while a turn runs, and why.

When llama.cpp's decode threads take every core, each redraw preempts one of them
and the others wait for it at the next barrier. Measured on a 2-core machine with
2 decode threads: a process that burns 1% of a core in bursts twice a second slows
decode by 1.6%, 2% by 3%, 4% by 5.3%. There kvtop redraws once a second (as nvtop
does); with a core to spare it redraws four times a second. ``--refresh`` overrides.
"""

from __future__ import annotations

from runner.process.parent import BATCH_S

BUSY_S = 1.0  # every core decodes
SPARE_S = 0.25  # a core to spare
MIN_S, MAX_S = BATCH_S, 10.0  # token events arrive in BATCH_S batches: no faster redraw shows more
CHART_EVERY = 4  # the chart (plotext, the costliest redraw) every 4th update
MIN_CHART_S = 1.0
MAX_PREFILL_S = 0.5  # the prefill bar and its ETA move at least twice a second


def refresh_interval(requested: float | None, n_threads: int, cores: int) -> tuple[float, str]:
    """(seconds between redraws during a turn, why) for ``--refresh`` (None: automatic)."""
    if requested is not None:
        return min(MAX_S, max(MIN_S, requested)), "set by --refresh"
    if n_threads >= cores:
        return BUSY_S, f"{n_threads} decode threads on {cores} cores"
    return SPARE_S, f"{cores - n_threads} of {cores} cores spare"


def chart_interval(refresh_s: float) -> float:
    return max(MIN_CHART_S, CHART_EVERY * refresh_s)


def prefill_interval(refresh_s: float) -> float:
    return min(MAX_PREFILL_S, refresh_s)
