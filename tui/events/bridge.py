"""Turns engine events (on the engine's one reader thread) into UI messages, throttled.

Most events become a message as they are: ``MESSAGES`` is that table, from the event's
type to the message it posts. Code is left only where a message is computed from more
than one event (``STEPS``): a turn's start resets what the turn accumulates, prefill
progress is paced, tokens are gathered into a cumulative ``DecodeUpdate``, and a turn's
end (done or lost) flushes the last of them first.

One token event arrives per token; the UI needs at most ~15 redraws a second. The
bridge accumulates text and per-token times and posts a cumulative
``DecodeUpdate`` at most every ``interval`` seconds (and always the last one).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kvtop.runner import events as ev
from kvtop.runner.policy.tune_messages import TuneMeasured, TuneProgress
from kvtop.runner.sanitize import clean_text
from kvtop.tui.base import messages as msg
from kvtop.tui.base.decode_series import DecodeSeries
from kvtop.tui.turn.quality import QualityMeasured, QualityProgress
from kvtop.tui.turn.tuning import TuneFinished, TuneProgressed

# engine event -> the message it posts as it is (events missing from both tables post nothing)
MESSAGES: dict[type, Callable[[object], object]] = {
    ev.LoadProgress: lambda e: msg.EngineLoadProgress(e.fraction),
    ev.Loaded: msg.EngineLoaded,
    ev.LoadFailed: lambda e: msg.EngineFailed(e.reason),
    ev.EngineDied: lambda e: msg.EngineFailed(e.reason, died=True),
    ev.EngineClosed: lambda e: msg.EngineEnded(e.reason),
    ev.EngineWarning: lambda e: msg.Notice(e.reason),
    ev.ContextShifted: msg.ContextShiftNote,
    ev.TurnRefused: msg.TurnRefused,
    ev.CacheCleared: lambda e: msg.CacheReset(),
    ev.PromptCache: msg.PromptCacheNote,
    ev.PromptMeasured: msg.PromptSized,
    ev.RecordedUser: lambda e: msg.RecordedUser(e.text),
    ev.RecordedNewChat: lambda e: msg.RecordedNewChat(),
    ev.RecordedUndoNewChat: lambda e: msg.RecordedUndoNewChat(),
    ev.RecordedForecast: lambda e: msg.RecordedForecast(e.forecast),
    ev.RecordedCPU: lambda e: msg.RecordedCPU(e.turn_id, e.others_cpu),
    ev.KldProgress: QualityProgress,
    ev.KldMeasured: QualityMeasured,
    TuneProgress: TuneProgressed,  # the app's "find faster settings" (tui/turn/tuning.py)
    TuneMeasured: TuneFinished,
}


class TurnBridge:
    """``interval`` paces decode updates and ``prefill_interval`` prefill progress; the
    app chooses both (``runner/pacing.py``): every redraw competes with llama.cpp's threads."""

    def __init__(self, post: Callable[[object], object], interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, prefill_interval: float = 0.5):
        self.post = post
        self.interval = interval
        self.prefill_interval = prefill_interval
        self.clock = clock
        self._reset(0)

    def _reset(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self.in_turn = False  # between this turn's TurnStarted and its end
        self.text: list[str] = []
        self.last_pos = 0
        self.first_t: float | None = None  # the first token's time (the estimate's live TTFT)
        self.series = DecodeSeries()  # tok/s per KV position, stalls cut out
        self._last_post = 0.0
        self._last_prefill_post = 0.0
        self._first_at_once = False  # a server turn without prefill progress: its first token at once

    def __call__(self, e: object) -> None:
        make = MESSAGES.get(type(e))
        if make is not None:
            self.post(make(e))
            return
        step = STEPS.get(type(e))
        if step is not None:
            step(self, e)

    def _started(self, e: ev.TurnStarted) -> None:
        self._reset(e.turn_id)
        self.in_turn = True
        # The first decode update waits one interval: redrawing as decode starts
        # stalls its first tokens (measured: 10 tokens at a fifth of the speed). Not
        # for a llama-server's turn that sent no prefill progress: it starts at its
        # first token, and a held token waited for the next chunk (a slow server's
        # reply showed "model: …" for 30 s with its first token here).
        self._last_post = self.clock()
        self._first_at_once = e.template_name == "server"
        self.post(msg.TurnBegan(e))

    def _prefill(self, e: ev.PrefillProgress) -> None:
        self._first_at_once = False
        now = self.clock()
        if e.done >= e.total or now - self._last_prefill_post >= self.prefill_interval:
            self._last_prefill_post = now
            self.post(msg.PrefillUpdate(e))

    def _token(self, e: ev.TokenEvent) -> None:
        self.text.append(e.text)
        at_once = self.first_t is None and self._first_at_once
        if self.first_t is None:
            self.first_t = e.t
        if e.token_id >= 0:
            self.last_pos = e.pos
            self.series.add(e.pos, e.t)
        now = self.clock()
        if at_once or now - self._last_post >= self.interval:
            self._last_post = now
            self._flush_decode()

    def _done(self, e: ev.TurnDone) -> None:
        self.in_turn = False
        self._flush_decode()
        self.post(msg.TurnFinished(e, tuple(self.series.points), tuple(self.series.stalls), tuple(self.series.passes)))

    def _lost(self, e: ev.EngineError) -> None:
        if self.in_turn:  # a lost turn's reply so far is shown whole, not as of the last update
            self._flush_decode()
        self.in_turn = False
        self.post(msg.TurnLost(e.reason))

    def _flush_decode(self) -> None:
        s = self.series
        if not s.count and not self.text:
            return
        self.post(msg.DecodeUpdate(self.turn_id, clean_text("".join(self.text)), self.last_pos, s.rate,
                                   tuple(s.points), tuple(s.stalls), self.first_t, tuple(s.passes)))


# engine event -> the step that computes its messages from what the turn gathered
STEPS: dict[type, Callable[[TurnBridge, object], None]] = {
    ev.TurnStarted: TurnBridge._started,
    ev.PrefillProgress: TurnBridge._prefill,
    ev.TokenEvent: TurnBridge._token,
    ev.TurnDone: TurnBridge._done,
    ev.EngineError: TurnBridge._lost,
}
