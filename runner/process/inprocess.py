"""The engine in this process, behind the same contract: for benchmarks and tests that
measure the engine without a pipe. Commands run on the thread that pumps: that thread
owns the llama.cpp context, and it is still the only one that produces events."""

from __future__ import annotations

import os
import queue
import sys

from kvtop.runner import events as ev
from kvtop.runner.process.child import CancelState, run_command
from kvtop.runner.process.commands import Command, Load, Quit
from kvtop.runner.process.contract import LOCAL, QueuedCommands, ReaderGuard, Sink
from kvtop.runner.settings import Settings


class InProcessEngine(QueuedCommands):
    kind = "in-process"
    capabilities = LOCAL

    def __init__(self, settings: Settings):
        self.settings = settings.resolved()
        self._work: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._cancel = CancelState()
        self._guard = ReaderGuard()
        self._closed = False
        self.loaded: ev.Loaded | None = None
        self.died = None

    @property
    def pid(self) -> int:
        return os.getpid()

    def cancel(self, upto: int) -> None:
        self._cancel.cancel(upto)

    def pump(self, sink: Sink) -> None:
        from kvtop.runner.engine.engine import Engine, EngineLoadError
        from kvtop.runner.sanitize import clean_line

        with self._guard:
            engine: Engine | None = None
            try:
                while True:
                    cmd = self._work.get()
                    if isinstance(cmd, Quit):
                        break
                    if isinstance(cmd, Load):
                        engine = Engine(cmd.settings, sink, self._cancel.event)
                        try:
                            self.loaded = engine.load()
                        except EngineLoadError as exc:
                            sink(ev.LoadFailed(str(exc)))
                            sink(ev.EngineClosed("load failed"))
                            return
                        continue
                    if engine is None:  # as the child: nothing runs before a Load
                        sink(ev.EngineError(f"{type(cmd).__name__} before the model was loaded"))
                        continue
                    try:
                        run_command(engine, cmd, sink, self._cancel)
                    except Exception as exc:
                        sink(ev.EngineError(clean_line(f"{type(exc).__name__}: {exc}")))
            finally:
                if engine is not None:
                    engine.close()
            sink(ev.EngineClosed())

    def close(self, timeout: float = 3.0) -> None:
        self._closed = True
        self._cancel.cancel(sys.maxsize)
        self._work.put(Quit())
