"""The Prefill pane's ETA and note before llama.cpp's first report.

kvtop's engine reports a prefill per micro-batch (runner/engine/prefill.py), so nothing is
measured until the first one ends: 5 s for a first micro-batch of 512 on a busy machine,
while the pane read "0/580 tok … ETA - computing" (new-user trial). Until then the pane
counts down the turn's forecast ("ETA ≈ 4.8 s (forecast)") and names the micro-batch in
flight ("computing tokens 1–512 of 580"), then switches to what was measured.
"""

from __future__ import annotations

from kvtop.runner.units import fmt_int, fmt_seconds


def in_flight(note: str, done: int, total: int, ubatch: int) -> str:
    """The note with the micro-batch being computed ("computing tokens 513–580 of 580");
    ``note`` as it is when no micro-batch size is known or the prefill is not running."""
    if note != "computing" or ubatch <= 0 or done >= total:
        return note
    return f"computing tokens {fmt_int(done + 1)}–{fmt_int(min(done + ubatch, total))} of {fmt_int(total)}"


def forecast_eta(forecast_s: float, elapsed: float) -> str:
    """The forecast's prefill time left after ``elapsed``; once that has run out, that
    the forecast was passed (never "0 ms" while the first micro-batch still runs)."""
    left = forecast_s - elapsed
    if left <= 0:
        return f"> forecast {fmt_seconds(forecast_s)}"
    return f"≈ {fmt_seconds(left)} (forecast)"
