"""Messages from the engine worker thread to the UI.

The worker calls ``post_message`` (which does not block it, unlike
``call_from_thread``). High-rate messages implement ``can_replace`` so Textual's
queue keeps only the newest one when the UI falls behind (as Toolong does); each
of them carries cumulative state, so dropping an older one loses nothing.
"""

from __future__ import annotations

from textual.message import Message

from runner import events as ev


class EngineLoadProgress(Message):
    def __init__(self, fraction: float) -> None:
        super().__init__()
        self.fraction = fraction

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EngineLoadProgress)


class ModelInspected(Message):
    """GGUF facts, KV layout and hardware profile, known before the weights load."""

    def __init__(self, facts, hardware, layout, preflight) -> None:
        super().__init__()
        self.facts = facts
        self.hardware = hardware
        self.layout = layout
        self.preflight = preflight


class EngineLoaded(Message):
    def __init__(self, loaded: ev.Loaded) -> None:
        super().__init__()
        self.loaded = loaded


class EngineFailed(Message):
    """Loading failed, or the engine died: ``reason`` is one line for the user."""

    def __init__(self, reason: str, died: bool = False) -> None:
        super().__init__()
        self.reason = reason
        self.died = died


class TurnBegan(Message):
    def __init__(self, started: ev.TurnStarted) -> None:
        super().__init__()
        self.started = started


class ContextShiftNote(Message):
    """The engine left the chat's oldest turns out of this turn's prompt."""

    def __init__(self, shift: ev.ContextShifted) -> None:
        super().__init__()
        self.shift = shift


class PrefillUpdate(Message):
    def __init__(self, progress: ev.PrefillProgress) -> None:
        super().__init__()
        self.progress = progress

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PrefillUpdate) and message.progress.turn_id == self.progress.turn_id


class DecodeUpdate(Message):
    """Cumulative decode state of the running turn."""

    def __init__(self, turn_id: int, text: str, pos: int, tok_s: float | None,
                 series: tuple[tuple[int, float], ...], stalls: tuple[tuple[int, float], ...] = (),
                 first_t: float | None = None) -> None:
        super().__init__()
        self.turn_id = turn_id
        self.first_t = first_t  # the turn's first token, on the engine's clock (time.monotonic)
        self.text = text
        self.pos = pos
        self.tok_s = tok_s
        self.series = series  # (KV position, tok/s over the last few tokens)
        self.stalls = stalls  # (KV position after a pause, its seconds): tui/decode_series.py

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DecodeUpdate) and message.turn_id == self.turn_id


class TurnFinished(Message):
    def __init__(self, result: ev.TurnDone | ev.TurnRefused, series: tuple = (), stalls: tuple = ()) -> None:
        super().__init__()
        self.result = result
        self.series = series
        self.stalls = stalls


class CacheReset(Message):
    pass


class EngineEnded(Message):
    """The engine's event stream ended on purpose (closed, end of a recording)."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class RecordedUser(Message):
    """Replay: the recorded user sent this message."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class RecordedNewChat(Message):
    """Replay: the recorded user started a new chat."""


class RecordedUndoNewChat(Message):
    """Replay: the recorded user brought back the chat the last new chat put aside."""


class PromptFileRead(Message):
    """A ``/file`` or ``--prompt-file`` was read (off the UI thread): its text, or why not."""

    def __init__(self, path: str, text: str | None, error: str | None) -> None:
        super().__init__()
        self.path = path
        self.text = text
        self.error = error


class HardwareProbing(Message):
    """The hardware probe at start (the CPU's bandwidth and FLOPS, seconds and more on a
    busy machine) began (``running``) or ended: the engine starts only after it, so the
    status bar says what runs instead of a frozen "loading 0%"."""

    def __init__(self, running: bool) -> None:
        super().__init__()
        self.running = running


class HardwareReprobed(Message):
    """The CPU was probed again (a measured rate beat its ceiling): the new profile."""

    def __init__(self, hardware, note: str) -> None:
        super().__init__()
        self.hardware = hardware
        self.note = note


class ForecastNote(Message):
    """Why the draft cannot be forecast (a ``/file`` that cannot be sent), for request ``request_id``."""

    def __init__(self, request_id: int, text: str) -> None:
        super().__init__()
        self.request_id = request_id
        self.text = text


class RecordedForecast(Message):
    """A replay's recorded forecast for the turn it is playing."""

    def __init__(self, forecast) -> None:
        super().__init__()
        self.forecast = forecast


class RecordedCPU(Message):
    """A replay's recorded CPU share of other processes for the turn about to end."""

    def __init__(self, turn_id: int, others_cpu: float) -> None:
        super().__init__()
        self.turn_id, self.others_cpu = turn_id, others_cpu


class PromptSized(Message):
    """The engine's answer to ``MeasurePrompt``: the draft's size as the next prompt."""

    def __init__(self, measured) -> None:
        super().__init__()
        self.measured = measured  # runner.events.PromptMeasured


class Notice(Message):
    """A warning for the user from a worker thread."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class PromptCacheNote(Message):
    def __init__(self, event) -> None:
        super().__init__()
        self.event = event


class TurnLost(Message):
    """The engine failed a command (its reason is one line); it is still running."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class ServerPolled(Message):
    """A poll of one llama-server's /slots and /metrics (``kvtop --server``)."""

    def __init__(self, index: int, snapshot) -> None:
        super().__init__()
        self.index = index
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ServerPolled) and message.index == self.index


class ServerRestarted(Message):
    """One llama-server is another process now (``runner.server.identity``): said once,
    never replaced by a later poll."""

    def __init__(self, index: int, restart) -> None:
        super().__init__()
        self.index = index
        self.restart = restart


class LoadLevelDone(Message):
    """``kvtop load``: one level's rows (a fleet's: one per server, then the "all" row)."""

    def __init__(self, rows: list[dict]) -> None:
        super().__init__()
        self.rows = rows


class LoadProgress(Message):
    """``kvtop load``: what the sweep does now ("level 2/4: 2 users"); only the newest counts."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress)


class LoadEnded(Message):
    """``kvtop load``: the sweep ended (done, stopped or failed): a ``SweepResult``."""

    def __init__(self, result) -> None:
        super().__init__()
        self.result = result
