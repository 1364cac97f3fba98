"""Typed records of a chat: what was said, and what each turn measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from kvtop.runner import events as ev

if TYPE_CHECKING:
    from kvtop.runner.calibration.forecast import Forecast


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
    forecast: Forecast | None = None  # the forecast shown at its start

    def to_dict(self) -> dict[str, Any]:
        """The plain form the debug bundle and the CSV export write."""
        return {"user": self.user, "stop_reason": self.stop_reason, "metrics": self.metrics.to_dict(),
                "first_diff_index": self.first_diff_index, "diff_context": self.diff_context,
                "others_cpu": self.others_cpu,
                "context_shift": asdict(self.context_shift) if self.context_shift else None,
                "forecast": asdict(self.forecast) if self.forecast is not None else None}


@dataclass(frozen=True)
class DecodeSoFar:
    """A turn's decode as the UI last heard of it: the KV position of its newest token
    and when its first token came (the engine's clock, ``time.monotonic``). The reader
    thread gathers tokens and the UI receives this at its own pace (tui/events/bridge.py)."""

    turn_id: int
    pos: int
    first_t: float | None


@dataclass
class ActiveTurn:
    """The turn the app waits for: sent, maybe queued behind the load, maybe running.

    Everything the screen knows of the live turn is here, updated by one ``apply`` with
    each event of the turn the UI receives: the F2 waterfall draws the turn in flight
    from it, the prefill pane's note after a prompt-cache restore reads it at the end."""

    turn_id: int | None  # None: a replayed turn whose id the recording will tell
    user: str
    t_submit: float
    started: ev.TurnStarted | None = None
    cancel_requested_at: float | None = None
    shift: ev.ContextShifted | None = None  # the context shift before its prefill, if any
    forecast: Forecast | None = None  # the forecast shown when it started
    reports: list[tuple[int, float]] = field(default_factory=list)  # (done, elapsed_s) of each prefill
    # report the UI received (they are paced: one may stand for several micro-batches)
    first_token_s: float | None = None  # submit -> first token, once it came
    decoded: int = 0  # tokens decoded so far
    cache_event: ev.PromptCache | None = None  # its --prompt-cache restore or save, if any

    def apply(self, e: object) -> None:
        """One event of this turn: the engine's (``TurnStarted``, ``ContextShifted``,
        ``PrefillProgress``, ``PromptCache``) or its decode so far (``DecodeSoFar``)."""
        if isinstance(e, ev.TurnStarted):
            self.turn_id, self.started = e.turn_id, e
        elif isinstance(e, ev.ContextShifted):
            self.shift = e
        elif isinstance(e, ev.PrefillProgress):
            self.reports.append((e.done, e.elapsed_s))
        elif isinstance(e, ev.PromptCache):
            self.cache_event = e
        elif isinstance(e, DecodeSoFar) and e.first_t is not None:
            ttft = e.first_t - self.t_submit  # submit -> first token, one clock for every process
            self.first_token_s = ttft if 0 <= ttft < 86400 else None
            started = self.started.prompt_tokens if self.started else e.pos
            self.decoded = max(e.pos - started + 1, 1)
