"""``ChatSession``: one chat with one engine, as plain Python the tests drive without a screen.

It owns what a session is: the messages, the finished turns (typed records), the
turn in flight and which engine events still belong to it, the trace and
transcript writers, and the prompt-cache bookkeeping. It sends commands to the
engine (``runner.process.contract``) and never reads from it: the one reader hands
events to the UI, whose handlers call the ``on_*`` methods here on one thread.

Why turn ids matter: a new chat during a reply cancels the reply and clears the
cache, but the cancelled turn's last events still arrive after the new chat began;
``is_current`` tells the UI to drop them instead of drawing a dead reply.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from kvtop.runner import events as ev
from kvtop.runner.process.commands import Chat, ChatMessage, Reset
from kvtop.runner.process.contract import EngineClient
from kvtop.runner.records.paths import Paths, unique_file
from kvtop.runner.sanitize import clean_line
from kvtop.runner.session.records import ActiveTurn, DecodeSoFar, TurnRecord
from kvtop.runner.settings import Settings

if TYPE_CHECKING:
    from kvtop.runner.calibration.forecast import Forecast
    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.records.trace import TraceWriter
    from kvtop.runner.records.transcript import Transcript
    from kvtop.runner.system.hardware import HardwareProfile


class ChatSession:
    def __init__(self, engine: EngineClient, settings: Settings, paths: Paths, *, argv: list[str],
                 write_transcript: bool = True, record_trace: bool = True, trace_path: str | None = None,
                 resume: list[ChatMessage] | tuple[ChatMessage, ...] = (), clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.settings = settings
        self.paths = paths
        self.argv = list(argv)
        self.clock = clock
        self.write_transcript = write_transcript
        self.record_trace = record_trace
        self.trace_path = trace_path
        self.messages: list[ChatMessage] = list(resume)
        self._resumed = tuple(resume)  # written first into this session's transcript
        self.turns: list[TurnRecord] = []
        self.active: ActiveTurn | None = None
        self.queued: Chat | None = None  # sent before the model loaded
        self.cut: ActiveTurn | None = None  # the turn a new chat cut, until its end arrives
        self.cleared: list[ChatMessage] = []  # the chat the last new chat cleared: undo brings it back
        self.loaded: ev.Loaded | None = None
        self.load_error: str | None = None  # set when the engine failed or died
        self.trace: TraceWriter | None = None
        self.transcript: Transcript | None = None
        self.transcript_path: str | None = None  # kept after close, for the quit summary
        self.prompt_cache_restored = 0
        self._next_turn = 0
        # open_trace runs on the inspect worker, send on the main thread: a message sent
        # before the trace existed is written to it exactly once
        self._trace_lock = threading.Lock()

    # ------------------------------------------------------------ state
    @property
    def turn_running(self) -> bool:
        return self.active is not None

    @property
    def replaying(self) -> bool:
        return self.engine.capabilities.replaying

    def is_current(self, turn_id: int) -> bool:
        """Does an event of ``turn_id`` belong to the turn on screen?"""
        a = self.active
        return a is not None and (a.turn_id is None or a.turn_id == turn_id)

    # ------------------------------------------------------------ records
    def open_trace(self, facts: ModelFacts | None, hw: HardwareProfile | None, notice: Callable[[str], None]) -> None:
        """The trace file, once the model's facts and the hardware are known."""
        if not self.record_trace or self.trace is not None:
            return
        from kvtop.runner.records.trace import TraceWriter

        header = {"argv": self.argv, "settings": self.settings.to_dict(),
                  "hardware": hw.to_dict() if hw else None, "facts": asdict(facts) if facts else None}
        try:
            if self.trace_path:
                trace = TraceWriter(self.trace_path, header)
            else:
                path, fh = unique_file(self.paths.sessions_dir, time.strftime("trace-%Y%m%d-%H%M%S"), "jsonl")
                trace = TraceWriter(path, header, fh)
        except OSError as exc:
            notice(f"no trace: {clean_line(str(exc))}")
            return
        with self._trace_lock:
            self.trace = trace
            if self.active is not None and self.active.turn_id is not None:
                trace.user(self.active.user)  # sent before the trace existed (--prompt-file)

    def record(self, e: object) -> None:
        """Every engine event goes to the trace (called on the reader thread)."""
        if self.trace is not None:
            self.trace.event(e)

    def record_forecast(self, forecast: Forecast) -> None:
        """The forecast shown at a turn's start: kept with the turn (the waterfall shows
        it beside the measured TTFT) and in the trace, so a replay shows it too."""
        from dataclasses import asdict

        if self.active is not None:
            self.active.forecast = forecast
        with self._trace_lock:
            if self.trace is not None and not self.replaying:
                self.trace.forecast(asdict(forecast))

    def _record_cpu(self, turn_id: int, others_cpu: float | None) -> None:
        """The turn's CPU share of other processes into the trace: its verdict names it
        first when large, and a replay (of the trace or a bundle) must say it too."""
        if others_cpu is None:
            return
        with self._trace_lock:
            if self.trace is not None and not self.replaying:
                self.trace.cpu(turn_id, min(max(float(others_cpu), 0.0), 1.0))

    def _open_transcript(self, notice: Callable[[str], None]) -> None:
        if not self.write_transcript or self.transcript is not None or self.replaying:
            return
        from kvtop.runner.records.transcript import Transcript

        try:
            transcript = Transcript(self.paths.sessions_dir, {
                "model": self.loaded.path if self.loaded else self.settings.model,
                "settings": self.settings.to_dict(), "argv": self.argv})
            transcript.resumed(self._resumed)  # so the next --resume restores them too, not only the new turns
            self.transcript, self.transcript_path = transcript, transcript.path
        except OSError as exc:
            notice(f"no transcript: {clean_line(str(exc))}")

    # ------------------------------------------------------------ commands
    def send(self, text: str, threads: tuple[int, int] | None = None) -> str | None:
        """Start a turn with the user's ``text``; the reason it cannot, or None.
        ``threads``: the (decode, prefill) threads it runs on, when fewer than the
        engine's (the cores other processes leave free); None: the engine's own."""
        if self.replaying:
            return "this is a replay: input is off"
        if self.active is not None:
            return "A turn is running: Esc cancels it."
        if self.load_error is not None:
            return "No engine: " + self.load_error + " (Ctrl+R restarts it)"
        self._next_turn += 1
        now = self.clock()
        self.messages.append(ChatMessage("user", text))
        with self._trace_lock:
            self.active = ActiveTurn(self._next_turn, text, now)
            if self.trace is not None:
                self.trace.user(text)
        chat = Chat(self._next_turn, tuple(self.messages), now, threads=threads)
        if self.loaded is None:
            self.queued = chat
        else:
            self.engine.submit(chat)
        return None

    def cancel(self) -> bool:
        """Cancel the turn in flight; False when there is none."""
        a = self.active
        if a is None or a.turn_id is None:
            return False
        if self.queued is not None and self.queued.turn_id == a.turn_id:
            self.queued = None  # never reached the engine
            self._drop_active(user_message=True)
            return True
        if a.cancel_requested_at is None:
            a.cancel_requested_at = self.clock()
        self.engine.cancel(a.turn_id)
        return True

    def cancel_overdue(self, deadline_s: float) -> bool:
        """True when a cancel was asked over ``deadline_s`` ago and the turn still runs."""
        a = self.active
        return (a is not None and a.cancel_requested_at is not None
                and self.clock() - a.cancel_requested_at > deadline_s)

    def new_chat(self) -> None:
        """Start over: the running turn is cancelled (its late events are dropped) and the
        engine's cache is cleared after it, in order. The conversation is put aside, not
        forgotten (``undo_new_chat``): many users press Ctrl+L to redraw the screen. A new
        chat on an empty one keeps what the last one put aside."""
        running = self.active is not None
        if self.active is not None and self.active.turn_id is not None:
            self.engine.cancel(self.active.turn_id)
            self.cut = self.active  # its end still counts in the session's records
        if running and self.messages and self.messages[-1].role == "user":
            self.messages.pop()  # the cut question has no reply: the put-aside chat ends before it
        if self.messages:
            self.cleared = list(self.messages)
        self.queued = None
        self.active = None
        self.messages.clear()
        if not self.replaying and self.load_error is None:
            self.engine.submit(Reset())
        if self.transcript is not None:
            self.transcript.event("new_chat")
        if self.trace is not None and not self.replaying:
            self.trace.new_chat()

    def undo_new_chat(self) -> str | None:
        """Bring back the chat the last new chat put aside; the one on screen is put aside
        in its place (a second undo swaps back). The reason it cannot, or None. The
        engine's cache is not cleared: the next turn keeps the prefix the cache and the
        restored chat share and prefills the rest, as after any edit of the chat."""
        if self.active is not None:
            return "A turn is running: Esc cancels it, then undo."
        if not self.cleared:
            return "No chat to bring back: Ctrl+L has not cleared one."
        self.messages, self.cleared = self.cleared, list(self.messages)
        if self.transcript is not None:
            self.transcript.event("undo_new_chat")
        if self.trace is not None and not self.replaying:
            self.trace.undo_new_chat()
        return None

    def recorded_user(self, text: str) -> None:
        """Replay: the recorded user sent ``text``; the next turn's events are its turn."""
        self.messages.append(ChatMessage("user", text))
        self.active = ActiveTurn(None, text, self.clock())

    def restart(self, engine: EngineClient) -> None:
        """A fresh engine with the same settings; the conversation stays (the next turn
        prefills all of it again)."""
        self.engine = engine
        self.loaded = None
        self.load_error = None
        self.queued = None
        if self.active is not None:
            self._drop_active(user_message=True)

    # ------------------------------------------------------------ events
    def on_loaded(self, loaded: ev.Loaded, notice: Callable[[str], None],
                  threads_for: Callable[[], tuple[int, int] | None] | None = None) -> None:
        """The model is loaded: a message sent before it (``-p``, a draft sent while
        loading) goes now, on the threads ``threads_for`` gives at this moment's load
        (at send the engine's threads were not known: it ran on all of them beside a busy
        core, against the forecast it was shown)."""
        self.loaded = loaded
        self._open_transcript(notice)
        if self.queued is not None:
            chat, self.queued = self.queued, None
            if threads_for is not None:
                chat = replace(chat, threads=threads_for())
            self.engine.submit(chat)

    def apply(self, e: object) -> None:
        """An event of the turn on screen, as the UI received it (after ``is_current``):
        the live turn (``ActiveTurn.apply``) follows it. A context shift left the chat's
        oldest turns out of this turn's prompt only (the chat keeps them: the next turn
        decides again from all of it). A replay's decode is on the recording's clock, not
        this one: its first token is not timed against this submit."""
        if isinstance(e, ev.PromptCache):
            self.prompt_cache_restored = e.tokens if e.action == "restored" else 0
        if isinstance(e, DecodeSoFar) and self.replaying:
            return
        if self.active is not None:
            self.active.apply(e)

    def on_turn_done(self, e: ev.TurnDone, text: str, notice: Callable[[str], None],
                     others_cpu: float | None = None) -> TurnRecord:
        rec = turn_record(self.active, e, e.stop_reason, others_cpu)
        self._record_cpu(e.turn_id, others_cpu)
        self.active = None
        self.turns.append(rec)
        self.messages.append(ChatMessage("assistant", text))
        if self.transcript is not None:
            try:
                self.transcript.turn(rec.user, text, e.stop_reason, e.metrics)
            except OSError as exc:
                notice(f"transcript write failed: {clean_line(str(exc))}")
        return rec

    def on_cut_turn_done(self, e: ev.TurnDone, others_cpu: float | None = None) -> bool:
        """The end of the turn a new chat cut: it ran and used the engine, so it stays in
        the session's turns (the waterfall, the bundle, the quit summary), as a cancelled
        turn does; it is no longer part of the conversation. False: not that turn."""
        a = self.cut
        if a is None or a.turn_id != e.turn_id:
            return False
        self.cut = None
        stop = "new_chat" if e.stop_reason == "cancelled" else e.stop_reason  # it may have ended first
        self.turns.append(turn_record(a, e, stop, others_cpu))
        self._record_cpu(e.turn_id, others_cpu)
        return True

    def save_turn_in_flight(self, text: str, stop_reason: str) -> bool:
        """kvtop quits before the running turn ended (its engine did not stop in time, a
        signal, the terminal gone): the user's message and the reply so far go into the
        transcript, so ``--resume`` keeps them. False when there is no such turn."""
        a = self.active
        if a is None or a.turn_id is None:
            return False
        self.active = None
        self.messages.append(ChatMessage("assistant", text))
        if self.transcript is None:
            return False
        try:
            self.transcript.turn(a.user, text, stop_reason, None)
        except (OSError, ValueError):  # a full disk; a transcript already closed
            return False
        return True

    def on_turn_refused(self, e: ev.TurnRefused) -> None:
        self._drop_active(user_message=True)

    def on_engine_gone(self, reason: str) -> bool:
        """The engine died or its load failed. True the first time only: report once."""
        first = self.load_error is None
        self.load_error = self.load_error or reason
        self.queued = None
        if self.active is not None:
            self.active = None
        return first

    def _drop_active(self, user_message: bool) -> None:
        if user_message and self.messages and self.messages[-1].role == "user":
            self.messages.pop()
        self.active = None

    def close(self) -> None:
        if self.transcript is not None:
            self.transcript.close()
            self.transcript = None
        if self.trace is not None:
            self.trace.close()


def turn_record(a: ActiveTurn | None, e: ev.TurnDone, stop_reason: str, others_cpu: float | None) -> TurnRecord:
    """The record of the turn ``a`` (None: one the session lost track of) that ``e`` ended."""
    started = a.started if a else None
    return TurnRecord(a.user if a else "", stop_reason, e.metrics,
                      started.first_diff_index if started else None,
                      started.diff_context if started else None, others_cpu,
                      a.shift if a else None, a.forecast if a else None)


def reserve_id(session: ChatSession) -> int:
    """A turn id for work that is not a turn (the KV cache's quality measurement): the
    engine's ``cancel`` reaches it as it reaches a turn, and the next turn's id is above it."""
    session._next_turn += 1
    return session._next_turn
