"""The engine's child process: ``python -m runner.process.child CMD_FD EVENT_FD``.

A reader thread takes commands off the pipe and handles ``Cancel`` at once (it sets
the event the engine's abort callback polls; ctypes calls release the GIL, so it runs
during prefill); every other command runs in order on the main thread. Token events
go back in batches of ``BATCH_S`` seconds (each keeps its own timestamp).
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from kvtop.runner import events as ev
from kvtop.runner.pacing import BATCH_S  # token events sent together: one wake-up of the parent per batch
from kvtop.runner.policy.tune_messages import MeasureSettings
from kvtop.runner.process.commands import (
    Cancel,
    Chat,
    Command,
    Generate,
    Load,
    MeasureKld,
    MeasurePrompt,
    Quit,
    Reset,
    Tokenize,
)
from kvtop.runner.process.lifeline import die_with_parent

if TYPE_CHECKING:
    from kvtop.runner.engine.engine import Engine

EOF_EXIT_S = 0.5  # after its command pipe ends, the time the child gives its main thread to stop


class CancelState:
    """Which turns are cancelled: every id up to ``upto``. Shared by the command reader
    (which raises it) and the main thread (which runs turns)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.upto = 0
        self.running = 0

    def cancel(self, upto: int) -> None:
        self.upto = max(self.upto, upto)
        if self.running and self.running <= self.upto:
            self.event.set()

    def begin(self, turn_id: int) -> bool:
        """False when the turn was cancelled before it started."""
        if turn_id <= self.upto:
            return False
        self.running = turn_id
        self.event.clear()
        if turn_id <= self.upto:  # a cancel that raced the two lines above
            self.event.set()
        return True

    def end(self) -> None:
        self.running = 0


class BatchingEmitter:
    """Token events go out in batches of up to BATCH_S; any other event flushes the
    batch first, keeping order. Each batch wakes the parent once, not once per token."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.batch: list[ev.TokenEvent] = []
        self.last_flush = 0.0

    def __call__(self, e: object) -> None:
        if isinstance(e, ev.TokenEvent):
            self.batch.append(e)
            now = time.monotonic()
            if now - self.last_flush >= BATCH_S:
                self.last_flush = now
                self.conn.send(ev.EventBatch(tuple(self.batch)))
                self.batch.clear()
            return
        if self.batch:
            self.conn.send(ev.EventBatch(tuple(self.batch)))
            self.batch.clear()
        self.last_flush = time.monotonic()  # the first batch of a turn waits BATCH_S too
        self.conn.send(e)


def run_command(engine: Engine, cmd: Command, emit: Callable[[object], None], cancel: CancelState) -> None:
    """One command on an engine that has loaded (``runner.engine.engine.Engine``)."""
    if isinstance(cmd, (Chat, Generate)):
        if not cancel.begin(cmd.turn_id):
            emit(ev.TurnRefused(cmd.turn_id, "cancelled before it started", 0, engine.n_ctx))
            return
        try:
            if isinstance(cmd, Chat):
                engine.chat([m.as_dict() for m in cmd.messages], cmd.turn_id, cmd.t_submit, cmd.n_predict,
                            threads=cmd.threads)
            else:
                engine.generate(list(cmd.tokens), cmd.turn_id, cmd.t_submit, n_predict=cmd.n_predict,
                                ignore_eog=cmd.ignore_eog, threads=cmd.threads)
        finally:
            cancel.end()
    elif isinstance(cmd, Reset):
        engine.reset()
    elif isinstance(cmd, Tokenize):
        emit(ev.Tokenized(cmd.request_id, tuple(engine.tokenize(cmd.text, add_special=cmd.add_special))))
    elif isinstance(cmd, MeasurePrompt):
        emit(engine.measure_prompt(cmd.request_id, [m.as_dict() for m in cmd.messages]))
    elif isinstance(cmd, MeasureKld):
        from kvtop.runner.engine.live_kld import measure_chat

        if not cancel.begin(cmd.turn_id):
            emit(ev.KldMeasured(cmd.turn_id, 0, 0, "", "", (), 0.0, "cancelled", time.monotonic()))
            return
        try:
            measure_chat(engine, cmd.turn_id, [m.as_dict() for m in cmd.messages], emit, cancel.event)
        finally:
            cancel.end()
    elif isinstance(cmd, MeasureSettings):  # the app's "find faster settings" (runner/engine/tune_in_engine.py)
        from kvtop.runner.engine.tune_in_engine import run_measure

        run_measure(engine, cmd, emit, cancel)


def child_main(cmd_fd: int, ev_fd: int) -> int:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the UI's to handle
    cmd_conn = Connection(cmd_fd, writable=False)
    emit = BatchingEmitter(Connection(ev_fd, readable=False))
    cancel = CancelState()
    work: queue.SimpleQueue[Command] = queue.SimpleQueue()

    def reader() -> None:
        while True:
            try:
                cmd = cmd_conn.recv()
            except (EOFError, OSError):  # the parent closed the pipe or is gone
                cancel.cancel(sys.maxsize)
                work.put(Quit())
                # a main thread busy loading a model does not see the Quit for seconds
                timer = threading.Timer(EOF_EXIT_S, os._exit, (0,))
                timer.daemon = True
                timer.start()
                return
            if isinstance(cmd, Cancel):
                cancel.cancel(cmd.upto)
                continue
            work.put(cmd)
            if isinstance(cmd, Quit):
                return

    threading.Thread(target=reader, daemon=True, name="kvtop-cmd").start()
    from kvtop.runner.engine.engine import Engine, EngineLoadError
    from kvtop.runner.sanitize import clean_line

    engine = None
    while True:
        cmd = work.get()
        try:
            if isinstance(cmd, Quit):
                break
            if isinstance(cmd, Load):
                engine = Engine(cmd.settings, emit, cancel.event)
                try:
                    engine.load()
                except EngineLoadError as exc:
                    emit(ev.LoadFailed(str(exc)))
                    break
            elif engine is not None:
                run_command(engine, cmd, emit, cancel)
        except (BrokenPipeError, OSError):
            break  # the parent went away
        except Exception as exc:
            try:
                emit(ev.EngineError(clean_line(f"{type(exc).__name__}: {exc}")))
            except OSError:
                break
    if engine is not None:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1]), int(sys.argv[2])))
