"""Run the engine in a child process that kvtop owns, as Ollama runs its llama.cpp runner.

Why a child: a llama.cpp ``GGML_ASSERT`` aborts the whole process, an out-of-memory
kill takes the process with it, and native code may write to file descriptors 1
and 2. In the child, fds 1 and 2 point at a log file, so none of that reaches the
terminal UI; the parent sees the pipe close, reads the exit status and the log's
last lines, and reports ``EngineDied``.

Protocol: two pipes of pickled objects. Commands (parent -> child) are tuples;
events (child -> parent) are the frozen dataclasses of ``runner.events``. A reader
thread in the child handles ``cancel`` at once (it sets the event the engine's
abort callback polls; ctypes calls release the GIL, so it runs during prefill).
The child is started with ``python -m runner.process.parent`` (not multiprocessing's spawn,
which would re-import the UI's main module), and dies with its parent (PDEATHSIG).

``InProcessEngine`` offers the same interface without a child, for tests and
benchmarks.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Callable

from runner import events as ev
from runner.settings import Settings

OnEvent = Callable[[object], None]
# Seconds of token events sent together from the child. Each batch wakes the parent:
# measured during decode, 20 batches a second cost the UI's receiving thread 4.5 ms of
# CPU a second, 4 a second 2 ms (the UI redraws at most 4 times a second anyway).
BATCH_S = 0.25


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a Python child that imports ``runner``: this checkout first
    on PYTHONPATH (kvtop may run from a clone that is not installed), plus ``extra``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class EngineUnavailable(Exception):
    """The engine could not load, or its process died; the message is for a user."""


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _tail(path: str, n: int = 3) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    keep = [ln.strip() for ln in lines if ln.strip()]
    asserts = [ln for ln in keep if "GGML_ASSERT" in ln or "error" in ln.lower()]
    return " | ".join((asserts or keep)[-n:])


class EngineProcess:
    """Parent side. ``start`` and ``chat`` block (call them from a worker thread);
    ``cancel`` may be called from any thread."""

    def __init__(self, settings: Settings, log_path: str | None = None):
        self.settings = settings.resolved()
        self.log_path = log_path or os.path.join(
            tempfile.gettempdir(), f"kvtop-engine-{os.getpid()}-{id(self):x}.log")
        self.proc: subprocess.Popen | None = None
        self._cmd: Connection | None = None
        self._events: Connection | None = None
        self._send_lock = threading.Lock()
        self.loaded: ev.Loaded | None = None
        self.died: ev.EngineDied | None = None
        self._turn = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, on_event: OnEvent) -> ev.Loaded:
        cmd_r, cmd_w = os.pipe()
        ev_r, ev_w = os.pipe()
        env = child_env(GGML_NO_BACKTRACE="1")  # an abort should log its assertion, not run gdb
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "runner.process.child", str(cmd_r), str(ev_w)],
                pass_fds=(cmd_r, ev_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=env, start_new_session=True,
            )
        finally:
            log.close()
            os.close(cmd_r)
            os.close(ev_w)
        self._cmd = Connection(cmd_w, readable=False)
        self._events = Connection(ev_r, writable=False)
        self._send(("load", self.settings))
        while True:
            e = self._recv(on_event)
            if isinstance(e, ev.Loaded):
                self.loaded = e
                return e
            if isinstance(e, ev.LoadFailed):
                self.close()
                raise EngineUnavailable(e.reason)

    def _send(self, cmd: tuple) -> None:
        with self._send_lock:
            if self._cmd is None:
                raise EngineUnavailable("the engine is not running")
            try:
                self._cmd.send(cmd)
            except (BrokenPipeError, OSError):
                raise EngineUnavailable(self._death_reason()) from None

    def _death_reason(self) -> str:
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        tail = _tail(self.log_path)
        reason = f"the engine process died ({_signal_name(code)})"
        if tail:
            reason += f": {tail}"
        self.died = ev.EngineDied(code, reason)
        return reason

    def _recv(self, on_event: OnEvent):
        assert self._events is not None
        while True:
            try:
                e = self._events.recv()
            except (EOFError, OSError):
                reason = self._death_reason()
                on_event(self.died)
                raise EngineUnavailable(reason) from None
            if not isinstance(e, ev.EventBatch):
                on_event(e)
                return e
            for item in e.events:
                on_event(item)

    def chat(self, messages: list[dict], on_event: OnEvent, t_submit: float | None = None,
             n_predict: int | None = None) -> ev.TurnDone | ev.TurnRefused:
        self._turn += 1
        self._send(("chat", self._turn, messages, t_submit or time.monotonic(), n_predict))
        return self._wait_turn(on_event)

    def generate(self, tokens: list[int], on_event: OnEvent, n_predict: int,
                 ignore_eog: bool = True) -> ev.TurnDone | ev.TurnRefused:
        self._turn += 1
        self._send(("generate", self._turn, tokens, time.monotonic(), n_predict, ignore_eog))
        return self._wait_turn(on_event)

    def _wait_turn(self, on_event: OnEvent):
        while True:
            e = self._recv(on_event)
            if isinstance(e, (ev.TurnDone, ev.TurnRefused)):
                return e
            if isinstance(e, ev.EngineError):
                raise EngineUnavailable(e.reason)

    def cancel(self) -> None:
        try:
            self._send(("cancel",))
        except EngineUnavailable:
            pass

    def reset(self, on_event: OnEvent = lambda e: None) -> None:
        self._send(("reset",))
        while not isinstance(self._recv(on_event), ev.CacheCleared):
            pass

    def tokenize(self, text: str) -> list[int]:
        self._send(("tokenize", text))
        while True:
            e = self._recv(lambda e: None)
            if isinstance(e, list):
                return e

    def close(self, timeout: float = 3.0) -> None:
        """Stop the child: ask, then SIGTERM, then SIGKILL. Never leaves an orphan."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                try:
                    with self._send_lock:
                        if self._cmd is not None:
                            self._cmd.send(("cancel",))
                            self._cmd.send(("quit",))
                except OSError:
                    pass
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.terminate()
                    try:
                        self.proc.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        self.proc.kill()
                        self.proc.wait()
        finally:
            for c in (self._cmd, self._events):
                try:
                    if c is not None:
                        c.close()
                except OSError:
                    pass
            self._cmd = self._events = None
            if self.died is None:  # keep the log only when it explains a death
                try:
                    os.unlink(self.log_path)
                except OSError:
                    pass


class InProcessEngine:
    """The same interface as ``EngineProcess``, running the engine in this process."""

    def __init__(self, settings: Settings):
        from runner.engine.engine import Engine

        self._on_event: OnEvent = lambda e: None
        self.engine = Engine(settings, self._emit)
        self.settings = self.engine.settings
        self.loaded = None
        self.died = None
        self._turn = 0
        self._lock = threading.Lock()

    def _emit(self, e) -> None:
        self._on_event(e)

    @property
    def pid(self) -> int:
        return os.getpid()

    def alive(self) -> bool:
        return True

    def start(self, on_event: OnEvent) -> ev.Loaded:
        from runner.engine.engine import EngineLoadError

        self._on_event = on_event
        try:
            self.loaded = self.engine.load()
        except EngineLoadError as exc:
            raise EngineUnavailable(str(exc)) from None
        return self.loaded

    def chat(self, messages, on_event, t_submit=None, n_predict=None):
        with self._lock:
            self._turn += 1
            self._on_event = on_event
            self.engine.cancel_event.clear()
            return self.engine.chat(messages, self._turn, t_submit, n_predict)

    def generate(self, tokens, on_event, n_predict, ignore_eog=True):
        with self._lock:
            self._turn += 1
            self._on_event = on_event
            self.engine.cancel_event.clear()
            return self.engine.generate(tokens, self._turn, n_predict=n_predict, ignore_eog=ignore_eog)

    def cancel(self) -> None:
        self.engine.cancel_event.set()

    def reset(self, on_event: OnEvent = lambda e: None) -> None:
        with self._lock:
            self._on_event = on_event
            self.engine.reset()

    def tokenize(self, text: str) -> list[int]:
        return self.engine.tokenize(text)

    def close(self, timeout: float = 0) -> None:
        self.engine.close()


# ---------------------------------------------------------------- child side
def _die_with_parent() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def child_main(cmd_fd: int, ev_fd: int) -> int:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the UI's to handle
    cmd_conn = Connection(cmd_fd, writable=False)
    ev_conn = Connection(ev_fd, readable=False)
    cancel = threading.Event()
    work: queue.Queue = queue.Queue()

    def reader() -> None:
        while True:
            try:
                cmd = cmd_conn.recv()
            except (EOFError, OSError):
                cancel.set()
                work.put(("quit",))
                return
            if cmd[0] == "cancel":
                cancel.set()
            else:
                work.put(cmd)
                if cmd[0] == "quit":
                    return

    threading.Thread(target=reader, daemon=True, name="kvtop-cmd").start()

    batch: list = []
    last_flush = [0.0]

    def emit(e) -> None:
        # Token events go out in batches of up to BATCH_S (timestamps are the child's, so
        # no figure changes); any other event flushes the batch first, keeping order.
        if isinstance(e, ev.TokenEvent):
            batch.append(e)
            now = time.monotonic()
            if now - last_flush[0] >= BATCH_S:
                last_flush[0] = now
                ev_conn.send(ev.EventBatch(tuple(batch)))
                batch.clear()
            return
        if batch:
            ev_conn.send(ev.EventBatch(tuple(batch)))
            batch.clear()
        last_flush[0] = time.monotonic()  # the first batch of a turn waits BATCH_S too
        ev_conn.send(e)

    from runner.engine.engine import Engine, EngineLoadError

    engine = None
    while True:
        cmd = work.get()
        kind = cmd[0]
        try:
            if kind == "quit":
                break
            if kind == "load":
                engine = Engine(cmd[1], emit, cancel)
                try:
                    engine.load()
                except EngineLoadError as exc:
                    emit(ev.LoadFailed(str(exc)))
                    break
            elif kind == "chat":
                _, turn_id, messages, t_submit, n_predict = cmd
                cancel.clear()
                engine.chat(messages, turn_id, t_submit, n_predict)
            elif kind == "generate":
                _, turn_id, tokens, t_submit, n_predict, ignore_eog = cmd
                cancel.clear()
                engine.generate(tokens, turn_id, t_submit, n_predict=n_predict, ignore_eog=ignore_eog)
            elif kind == "reset":
                engine.reset()
            elif kind == "tokenize":
                emit(engine.tokenize(cmd[1]))
        except (BrokenPipeError, OSError):
            break  # the parent went away
        except Exception as exc:
            from runner.sanitize import clean_line

            try:
                emit(ev.EngineError(clean_line(f"{type(exc).__name__}: {exc}")))
            except OSError:
                break
    if engine is not None:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1]), int(sys.argv[2])))
