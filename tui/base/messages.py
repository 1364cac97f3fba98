"""Messages from the worker threads to the UI, as data (Toolong's messages.py).

Each message is a dataclass of what it carries and nothing else: the engine's event
itself where the UI needs all of it, the figures computed from several events where it
needs those (``DecodeUpdate``). ``tui/events/bridge.py`` is the table from engine event to
message. ``eq=False``: a message is a happening, not a value; two alike are still two.

The worker calls ``post_message`` (which does not block it, unlike
``call_from_thread``). High-rate messages implement ``can_replace`` so Textual's
queue keeps only the newest one when the UI falls behind (as Toolong does); each
of them carries cumulative state, so dropping an older one loses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from textual.message import Message

from kvtop.runner import events as ev


class TurnSink(Protocol):
    """What shows a turn (``tui/turn/turn_view.py``'s ``TurnView``)."""

    def shifted(self, shift: ev.ContextShifted) -> None: ...
    def began(self, started: ev.TurnStarted) -> None: ...
    def prefill(self, progress: ev.PrefillProgress) -> None: ...
    def decode(self, m: Any) -> None: ...
    def refused(self, r: ev.TurnRefused) -> None: ...
    def finished(self, m: Any) -> None: ...


class TurnMessage(Message):
    """A message about one turn. Every kind has the same handler, the App's
    ``on_turn_message``, which drops it when its turn is no longer current (a new chat,
    a restart) and hands it to the turn's view otherwise (``deliver``): one hop from the
    App to what draws it, where each kind had a handler that only forwarded."""

    turn_id: int  # the turn it is about (a field or a property of each kind)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.handler_name = "on_turn_message"  # Textual's handler name for the class: one for every kind

    def deliver(self, view: TurnSink) -> None:
        raise NotImplementedError


# ------------------------------------------------------------ loading
@dataclass(eq=False)
class EngineLoadProgress(Message):
    fraction: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EngineLoadProgress)


@dataclass(eq=False)
class ModelInspected(Message):
    """GGUF facts, KV layout and hardware profile, known before the weights load."""

    facts: object
    hardware: object
    layout: object
    preflight: object


@dataclass(eq=False)
class EngineLoaded(Message):
    loaded: ev.Loaded


@dataclass(eq=False)
class EngineFailed(Message):
    """Loading failed, or the engine died: ``reason`` is one line for the user."""

    reason: str
    died: bool = False


@dataclass(eq=False)
class EngineEnded(Message):
    """The engine's event stream ended on purpose (closed, end of a recording)."""

    reason: str


@dataclass(eq=False)
class HardwareProbing(Message):
    """The hardware probe at start (the CPU's bandwidth and FLOPS, seconds and more on a
    busy machine) began (``running``) or ended: the engine starts only after it, so the
    status bar says what runs instead of a frozen "loading 0%"."""

    running: bool


@dataclass(eq=False)
class HardwareReprobed(Message):
    """The CPU was probed again (a measured rate beat its ceiling): the new profile."""

    hardware: object
    note: str


# ------------------------------------------------------------ a turn
@dataclass(eq=False)
class TurnBegan(TurnMessage):
    started: ev.TurnStarted

    @property
    def turn_id(self) -> int:
        return self.started.turn_id

    def deliver(self, view: TurnSink) -> None:
        view.began(self.started)


@dataclass(eq=False)
class ContextShiftNote(TurnMessage):
    """The engine left the chat's oldest turns out of this turn's prompt."""

    shift: ev.ContextShifted

    @property
    def turn_id(self) -> int:
        return self.shift.turn_id

    def deliver(self, view: TurnSink) -> None:
        view.shifted(self.shift)


@dataclass(eq=False)
class PrefillUpdate(TurnMessage):
    progress: ev.PrefillProgress

    @property
    def turn_id(self) -> int:
        return self.progress.turn_id

    def deliver(self, view: TurnSink) -> None:
        view.prefill(self.progress)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PrefillUpdate) and message.progress.turn_id == self.progress.turn_id


@dataclass(eq=False)
class DecodeUpdate(TurnMessage):
    """Cumulative decode state of the running turn."""

    turn_id: int
    text: str
    pos: int
    tok_s: float | None
    series: tuple[tuple[int, float], ...]  # (KV position, tok/s over the last few tokens)
    stalls: tuple[tuple[int, float], ...] = ()  # (KV position after a pause, its seconds): tui/base/decode_series.py
    first_t: float | None = None  # the turn's first token, on the engine's clock (time.monotonic)
    passes: tuple[tuple[int, int], ...] = ()  # verify passes of more than one token: (KV position, tokens)

    def deliver(self, view: TurnSink) -> None:
        view.decode(self)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DecodeUpdate) and message.turn_id == self.turn_id


@dataclass(eq=False)
class TurnFinished(TurnMessage):
    """A turn that ran: its result, and its decode rates by position (``DecodeUpdate``'s)."""

    result: ev.TurnDone
    series: tuple = ()
    stalls: tuple = ()
    passes: tuple = ()  # DecodeUpdate's

    @property
    def turn_id(self) -> int:
        return self.result.turn_id

    def deliver(self, view: TurnSink) -> None:
        view.finished(self)


@dataclass(eq=False)
class TurnRefused(TurnMessage):
    """A turn the engine refused before its prefill (or cancelled before it started)."""

    refusal: ev.TurnRefused

    @property
    def turn_id(self) -> int:
        return self.refusal.turn_id

    def deliver(self, view: TurnSink) -> None:
        view.refused(self.refusal)


@dataclass(eq=False)
class TurnLost(Message):
    """The engine failed a command (its reason is one line); it is still running."""

    reason: str


@dataclass(eq=False)
class CacheReset(Message):
    pass


@dataclass(eq=False)
class PromptCacheNote(Message):
    event: ev.PromptCache


@dataclass(eq=False)
class Notice(Message):
    """A warning for the user from a worker thread."""

    text: str


@dataclass(eq=False)
class PromptSized(Message):
    """The engine's answer to ``MeasurePrompt``: the draft's size as the next prompt."""

    measured: ev.PromptMeasured


@dataclass(eq=False)
class PromptFileRead(Message):
    """A ``/file`` or ``--prompt-file`` was read (off the UI thread): its text, or why not."""

    path: str
    text: str | None
    error: str | None


@dataclass(eq=False)
class ForecastNote(Message):
    """Why the draft cannot be forecast (a ``/file`` that cannot be sent), for request ``request_id``."""

    request_id: int
    text: str


# ------------------------------------------------------------ replay
@dataclass(eq=False)
class RecordedUser(Message):
    """Replay: the recorded user sent this message."""

    text: str


@dataclass(eq=False)
class RecordedNewChat(Message):
    """Replay: the recorded user started a new chat."""


@dataclass(eq=False)
class RecordedUndoNewChat(Message):
    """Replay: the recorded user brought back the chat the last new chat put aside."""


@dataclass(eq=False)
class RecordedForecast(Message):
    """A replay's recorded forecast for the turn it is playing."""

    forecast: object


@dataclass(eq=False)
class RecordedCPU(Message):
    """A replay's recorded CPU share of other processes for the turn about to end."""

    turn_id: int
    others_cpu: float


# ------------------------------------------------------------ kvtop --server, kvtop load
@dataclass(eq=False)
class ServerPolled(Message):
    """A poll of one llama-server's /slots and /metrics (``kvtop --server``)."""

    index: int
    snapshot: object

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ServerPolled) and message.index == self.index


@dataclass(eq=False)
class ServerRestarted(Message):
    """One llama-server is another process now (``runner.server.identity``): said once,
    never replaced by a later poll."""

    index: int
    restart: object


@dataclass(eq=False)
class LoadLevelDone(Message):
    """``kvtop load``: one level's rows (a fleet's: one per server, then the "all" row)."""

    rows: list[dict]


@dataclass(eq=False)
class LoadProgress(Message):
    """``kvtop load``: what the sweep does now ("level 2/4: 2 users"); only the newest counts."""

    text: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress)


@dataclass(eq=False)
class LoadEnded(Message):
    """``kvtop load``: the sweep ended (done, stopped or failed): a ``SweepResult``."""

    result: object


@dataclass(eq=False)
class LoadRoof(Message):
    """``kvtop load``: the roof's formula with its inputs in figures (None: no roof, and ``note`` says why)."""

    formula: str | None
    note: str
