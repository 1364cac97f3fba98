"""Every interval kvtop keeps, in one place, and how the redraw pace is chosen.

Each redraw, sample or wake-up of the UI during a turn is CPU time taken from
llama.cpp's threads on a small machine, so every pace below is as slow as what it
shows allows.

When llama.cpp's decode threads take every core, each redraw preempts one of them
and the others wait for it at the next barrier. Measured on a 2-core machine with
2 decode threads: a process that burns 1% of a core in bursts twice a second slows
decode by 1.6%, 2% by 3%, 4% by 5.3%. There kvtop redraws once a second (as nvtop
does); with a core to spare it redraws four times a second. ``--refresh`` overrides.
"""

from __future__ import annotations

# The engine's child sends token events in batches of up to BATCH_S seconds: one
# wake-up of the UI process per batch instead of per token.
BATCH_S = 0.25

# The dashboard's redraw pace while a turn runs (``refresh_interval``).
BUSY_S = 1.0  # every core decodes
SPARE_S = 0.25  # a core to spare
MIN_S, MAX_S = BATCH_S, 10.0  # the bounds of --refresh: no faster redraw shows more than a batch
CHART_EVERY = 4  # the chart (plotext, the costliest redraw) every 4th update
MIN_CHART_S = 1.0
MAX_PREFILL_S = 0.5  # the prefill bar and its ETA move at least twice a second

# The transcript re-wraps the growing reply every CHAT_INTERVAL_S while decoding (the
# fixed-height stream tail shows it meanwhile): each catch-up re-lays out the screen,
# measured 30 ms of CPU at 1,000 tokens.
CHAT_INTERVAL_S = 10.0

# Memory (RSS, RAM, swap, GPUs) is sampled once a second; during a turn a sample waits
# for the turn's next update to share its frame, for at most MEMORY_HOLD_S.
MEMORY_SAMPLE_S = 1.0
# The forecast before Enter asks the engine to measure the draft once typing pauses
# this long (a burst of keys or a paste asks once).
FORECAST_DEBOUNCE_S = 0.3
MEMORY_HOLD_S = 2.0


def refresh_interval(requested: float | None, n_threads: int, cores: int) -> tuple[float, str]:
    """(seconds between redraws during a turn, why) for ``--refresh`` (None: automatic).

    ``--refresh`` is checked at the command line (``runner.cli_types.refresh_seconds``);
    a value from elsewhere is held to the same bounds here."""
    if requested is not None:
        return min(MAX_S, max(MIN_S, requested)), "set by --refresh"
    if n_threads >= cores:
        return BUSY_S, f"{n_threads} decode threads on {cores} cores"
    return SPARE_S, f"{cores - n_threads} of {cores} cores spare"


def chart_interval(refresh_s: float) -> float:
    return max(MIN_CHART_S, CHART_EVERY * refresh_s)


def prefill_interval(refresh_s: float) -> float:
    return min(MAX_PREFILL_S, refresh_s)

# kvtop --server: the server on screen is polled at the redraw pace, at most once every
# SERVER_POLL_S; the other servers of a fleet share FLEET_POLLS_PER_S polls a second
# (runner/server/fleet.py), so that 50 idle servers cost at most 3% of a core.
SERVER_POLL_S = 1.0
FLEET_POLLS_PER_S = 5.0
