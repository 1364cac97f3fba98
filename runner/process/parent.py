"""The engine in a child process that kvtop owns, as Ollama runs its llama.cpp runner.

Why a child: a llama.cpp ``GGML_ASSERT`` aborts the whole process, an out-of-memory
kill takes the process with it, and native code may write to file descriptors 1
and 2. In the child, fds 1 and 2 point at a log file, so none of that reaches the
terminal UI; the parent sees the pipe close, reads the exit status and the log's
last lines, and reports ``EngineDied`` once, from the one reader.

Protocol: two pipes of pickled objects. Commands (parent -> child) are the
dataclasses of ``runner.process.commands``, written by one writer thread so that
``submit`` and ``cancel`` never block the caller (a stopped child stops reading);
events (child -> parent) are the frozen dataclasses of ``runner.events``, read only
by ``pump``. The child is ``python -m runner.process.child`` (not multiprocessing's
spawn, which would re-import the UI's main module) and dies with its parent
(``runner.process.lifeline``).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from multiprocessing.connection import Connection

from kvtop.runner import events as ev
from kvtop.runner.process.commands import Cancel, Command, Load, Quit
from kvtop.runner.process.contract import LOCAL, EngineUnavailable, ReaderGuard, Sink
from kvtop.runner.process.lifeline import child_env
from kvtop.runner.settings import Settings

__all__ = ["EngineProcess", "EngineUnavailable"]


def exit_description(code: int | None) -> str:
    """``SIGKILL``, ``exit code 1`` or ``still running``: how a process ended."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def log_tail(path: str, n: int = 3) -> str:
    """The last lines of the engine's log, preferring assertions and errors."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    keep = [ln.strip() for ln in lines if ln.strip()]
    asserts = [ln for ln in keep if "GGML_ASSERT" in ln or "error" in ln.lower()]
    return " | ".join((asserts or keep)[-n:])


class EngineProcess:
    """Parent side of the child-process engine (see ``runner.process.contract``)."""

    kind = "process"
    capabilities = LOCAL

    def __init__(self, settings: Settings, log_path: str | None = None):
        self.settings = settings.resolved()
        self.log_path = log_path or os.path.join(
            tempfile.gettempdir(), f"kvtop-engine-{os.getpid()}-{id(self):x}.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self._cmd: Connection | None = None
        self._events: Connection | None = None
        self._outbox: queue.SimpleQueue[Command | None] = queue.SimpleQueue()
        self._guard = ReaderGuard()
        self._closing = False
        self._load_failed = False
        self.loaded: ev.Loaded | None = None
        self.died: ev.EngineDied | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        cmd_r, cmd_w = os.pipe()
        ev_r, ev_w = os.pipe()
        env = child_env(GGML_NO_BACKTRACE="1")  # an abort should log its assertion, not run gdb
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kvtop.runner.process.child", str(cmd_r), str(ev_w)],
                pass_fds=(cmd_r, ev_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=env, start_new_session=True,
            )
        finally:
            log.close()
            os.close(cmd_r)
            os.close(ev_w)
        self._cmd = Connection(cmd_w, readable=False)
        self._events = Connection(ev_r, writable=False)
        threading.Thread(target=self._write_loop, args=(self._cmd,), daemon=True,
                         name="kvtop-engine-writer").start()
        self.submit(Load(self.settings))

    def _write_loop(self, conn: Connection) -> None:
        while True:
            cmd = self._outbox.get()
            if cmd is None:
                return
            try:
                conn.send(cmd)
            except (OSError, ValueError):
                return  # the child is gone: the reader reports it

    def submit(self, command: Command) -> None:
        if self.proc is None:
            raise EngineUnavailable("the engine is not running")
        self._outbox.put(command)

    def cancel(self, upto: int) -> None:
        if self.proc is not None:
            self._outbox.put(Cancel(upto))

    def pump(self, sink: Sink) -> None:
        with self._guard:
            conn = self._events
            if conn is None:
                raise EngineUnavailable("the engine is not running")
            while True:
                try:
                    e = conn.recv()
                except (EOFError, OSError):
                    break
                if isinstance(e, ev.EventBatch):
                    for item in e.events:
                        sink(item)
                    continue
                if isinstance(e, ev.Loaded):
                    self.loaded = e
                elif isinstance(e, ev.LoadFailed):
                    self._load_failed = True
                sink(e)
            if self._closing or self._load_failed:
                sink(ev.EngineClosed("closed" if self._closing else "load failed"))
            else:
                sink(self._death())

    def _death(self) -> ev.EngineDied:
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        tail = log_tail(self.log_path)
        reason = f"the engine process died ({exit_description(code)})"
        reason += f": {tail}" if tail else "; its log is empty"
        reason += f" (log: {self.log_path})"
        self.died = ev.EngineDied(code, reason)
        return self.died

    def close(self, timeout: float = 3.0) -> None:
        """Stop the child: ask, then SIGTERM, then SIGKILL. Never leaves an orphan, and
        takes at most about ``2 * timeout`` seconds, even for a stopped (SIGSTOP) child."""
        if self.proc is None:
            return
        self._closing = True
        try:
            if self.proc.poll() is None:
                self._outbox.put(Cancel(sys.maxsize))
                self._outbox.put(Quit())
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.terminate()
                    try:
                        self.proc.wait(timeout=min(timeout, 1.0))
                    except subprocess.TimeoutExpired:
                        self.proc.kill()  # SIGKILL also ends a stopped process
                        self.proc.wait()
        finally:
            self._outbox.put(None)
            if self._cmd is not None:
                try:
                    self._cmd.close()
                except OSError:
                    pass
            self._cmd = None
            # the events end is the reader's; close it here only when nobody reads
            try:
                with self._guard:
                    if self._events is not None:
                        self._events.close()
                        self._events = None
            except RuntimeError:
                pass
            if self.died is None:  # keep the log only when it explains a death
                try:
                    os.unlink(self.log_path)
                except OSError:
                    pass
