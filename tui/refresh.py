"""How often the dashboard redraws while a turn runs: moved to ``runner.pacing``,
which owns every interval. Re-exported here while the app imports it from here."""

from __future__ import annotations

from runner.pacing import (  # noqa: F401
    BUSY_S,
    CHART_EVERY,
    MAX_PREFILL_S,
    MAX_S,
    MIN_CHART_S,
    MIN_S,
    SPARE_S,
    chart_interval,
    prefill_interval,
    refresh_interval,
)
