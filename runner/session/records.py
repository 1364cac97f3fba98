"""Typed records of a chat: what was said, and what each turn measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from runner import events as ev


@dataclass(frozen=True)
class TurnRecord:
    """One finished turn: the user's text, how it stopped, and its measurements."""

    user: str
    stop_reason: str
    metrics: ev.TurnMetrics
    first_diff_index: int | None = None  # where the prompt left the cached tokens
    diff_context: tuple[str, str] | None = None
    others_cpu: float | None = None  # other processes' share of the CPU during the turn (0..1)
    context_shift: ev.ContextShifted | None = None  # the oldest turns this prompt left out
    forecast: object | None = None  # the forecast shown at its start (runner.calibration.forecast.Forecast)

    def to_dict(self) -> dict:
        """The plain form the debug bundle and the CSV export write."""
        return {"user": self.user, "stop_reason": self.stop_reason, "metrics": self.metrics.to_dict(),
                "first_diff_index": self.first_diff_index, "diff_context": self.diff_context,
                "others_cpu": self.others_cpu,
                "context_shift": asdict(self.context_shift) if self.context_shift else None,
                "forecast": asdict(self.forecast) if self.forecast is not None else None}


@dataclass
class ActiveTurn:
    """The turn the app waits for: sent, maybe queued behind the load, maybe running."""

    turn_id: int | None  # None: a replayed turn whose id the recording will tell
    user: str
    t_submit: float
    started: ev.TurnStarted | None = None
    cancel_requested_at: float | None = None
    shift: ev.ContextShifted | None = None  # the context shift before its prefill, if any
    forecast: object | None = None  # the forecast shown when it started
