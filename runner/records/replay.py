"""``ReplayEngine``: a recorded trace played back behind the engine contract.

A replay is a recording, not a model: it plays every record of the trace in order,
the user's messages (``RecordedUser``) and new chats (``RecordedNewChat``) included,
so the dashboard shows what the live session showed, and ignores commands (the UI
says input is off). Events inside a turn keep their recorded spacing, scaled by
``speed`` (0 = at once); the gap between turns (the user typing) is not replayed.
"""

from __future__ import annotations

import threading

from kvtop.runner import events as ev
from kvtop.runner.process.commands import Command
from kvtop.runner.process.contract import Capabilities, ReaderGuard, Sink
from kvtop.runner.records.trace import Trace
from kvtop.runner.settings import Settings

MAX_GAP_S = 10.0  # a longer recorded pause (a stall, a suspended laptop) plays as this


class ReplayEngine:
    kind = "replay"

    def __init__(self, trace: Trace, speed: float = 1.0, settings: Settings | None = None):
        self.trace = trace
        self.speed = speed
        self.settings = settings or Settings(model=trace.header.get("settings", {}).get("model", "replay"))
        self._stop = threading.Event()
        self._guard = ReaderGuard()
        self.loaded = trace.loaded()
        self.died = None
        # a recording takes no input and has no engine to restart; its buffers are
        # llama.cpp's when kvtop ran the model, not when it watched a llama-server
        self.capabilities = Capabilities(takes_input=False, replaying=True, can_restart=False, second_context=False,
                                         llama_buffers=self.loaded is None or self.loaded.server is None)

    @property
    def pid(self) -> None:
        return None

    def alive(self) -> bool:
        return not self._stop.is_set()

    def start(self) -> None:
        pass

    def submit(self, command: Command) -> None:
        pass  # a recording takes no input

    def cancel(self, upto: int) -> None:
        pass

    def pump(self, sink: Sink) -> None:
        with self._guard:
            if self.loaded is None:
                sink(ev.LoadFailed("the trace has no Loaded event"))
                sink(ev.EngineClosed("load failed"))
                return
            prev_t = None
            # the CPU share of each turn is written after its end (the UI measures it
            # there): played just before the end, where the live app read it
            shares = {o[0]: o[1] for k, o in self.trace.records if k == "cpu" and isinstance(o, tuple)}
            for kind, obj in self.trace.records:
                if self._stop.is_set():
                    break
                if kind == "user":
                    prev_t = None
                    sink(ev.RecordedUser(str(obj)))  # a user record's text (parse_records checked it)
                elif kind == "new_chat":
                    sink(ev.RecordedNewChat())
                elif kind == "undo_new_chat":
                    sink(ev.RecordedUndoNewChat())
                elif kind == "forecast":
                    sink(ev.RecordedForecast(obj))
                elif kind == "cpu":
                    pass  # played before its turn's end (above)
                else:
                    t = getattr(obj, "t", None)
                    if self.speed > 0 and t is not None and prev_t is not None and t > prev_t:
                        if self._stop.wait(min(t - prev_t, MAX_GAP_S) / self.speed):
                            break
                    if t is not None:
                        prev_t = t
                    if isinstance(obj, (ev.TurnDone, ev.TurnRefused)) and obj.turn_id in shares:
                        sink(ev.RecordedCPU(obj.turn_id, shares[obj.turn_id]))
                    sink(obj)
            sink(ev.EngineClosed("end of the recording"))

    def close(self, timeout: float = 0) -> None:
        self._stop.set()


def latest_trace(sessions_dir: str) -> str | None:
    """The newest trace in the sessions folder, known by its header (``kvtop-trace``),
    newest by its recorded ``created`` time (a sane one), else by the file's mtime."""
    from kvtop.runner.records.paths import newest_by_header

    return newest_by_header(sessions_dir, "kvtop-trace", "created")


def count_turns(path: str, limit: int = 64 * 2**20) -> int:
    """How many messages a trace file records (its ``user`` lines), read up to ``limit``."""
    n = 0
    try:
        with open(path, "rb") as fh:
            for line in fh:
                n += line.startswith(b'{"type": "user"')
                limit -= len(line)
                if limit < 0:
                    break
    except OSError:
        return 0
    return n
