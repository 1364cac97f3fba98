"""Turns engine events (on the engine's one reader thread) into UI messages, throttled.

One token event arrives per token; the UI needs at most ~15 redraws a second. The
bridge accumulates text and per-token times and posts a cumulative
``DecodeUpdate`` at most every ``interval`` seconds (and always the last one).
"""

from __future__ import annotations

import time
from typing import Callable

from runner import events as ev
from runner.sanitize import clean_text

from . import messages as msg
from .decode_series import DecodeSeries


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
        if isinstance(e, ev.TurnStarted):
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
        elif isinstance(e, ev.ContextShifted):
            self.post(msg.ContextShiftNote(e))
        elif isinstance(e, ev.PrefillProgress):
            self._first_at_once = False
            now = self.clock()
            if e.done >= e.total or now - self._last_prefill_post >= self.prefill_interval:
                self._last_prefill_post = now
                self.post(msg.PrefillUpdate(e))
        elif isinstance(e, ev.TokenEvent):
            self._token(e)
        elif isinstance(e, ev.TurnDone):
            self.in_turn = False
            self._flush_decode()
            self.post(msg.TurnFinished(e, tuple(self.series.points), tuple(self.series.stalls)))
        elif isinstance(e, ev.TurnRefused):
            self.post(msg.TurnFinished(e))
        elif isinstance(e, ev.LoadProgress):
            self.post(msg.EngineLoadProgress(e.fraction))
        elif isinstance(e, ev.Loaded):
            self.post(msg.EngineLoaded(e))
        elif isinstance(e, ev.EngineDied):
            self.post(msg.EngineFailed(e.reason, died=True))
        elif isinstance(e, ev.CacheCleared):
            self.post(msg.CacheReset())
        elif isinstance(e, ev.PromptCache):
            self.post(msg.PromptCacheNote(e))
        elif isinstance(e, ev.EngineWarning):
            self.post(msg.Notice(e.reason))
        elif isinstance(e, ev.LoadFailed):
            self.post(msg.EngineFailed(e.reason))
        elif isinstance(e, ev.EngineError):
            if self.in_turn:  # a lost turn's reply so far is shown whole, not as of the last update
                self._flush_decode()
            self.in_turn = False
            self.post(msg.TurnLost(e.reason))
        elif isinstance(e, ev.EngineClosed):
            self.post(msg.EngineEnded(e.reason))
        elif isinstance(e, ev.RecordedUser):
            self.post(msg.RecordedUser(e.text))
        elif isinstance(e, ev.RecordedNewChat):
            self.post(msg.RecordedNewChat())
        elif isinstance(e, ev.RecordedUndoNewChat):
            self.post(msg.RecordedUndoNewChat())
        elif isinstance(e, ev.RecordedForecast):
            self.post(msg.RecordedForecast(e.forecast))
        elif isinstance(e, ev.RecordedCPU):
            self.post(msg.RecordedCPU(e.turn_id, e.others_cpu))
        elif isinstance(e, ev.PromptMeasured):
            self.post(msg.PromptSized(e))

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

    def _flush_decode(self) -> None:
        s = self.series
        if not s.count and not self.text:
            return
        self.post(msg.DecodeUpdate(self.turn_id, clean_text("".join(self.text)), self.last_pos, s.rate,
                                   tuple(s.points), tuple(s.stalls), self.first_t))
