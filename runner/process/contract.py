"""The engine contract: the one interface between the app and anything it can watch.

An engine is the model kvtop runs in its child process (``EngineProcess``), the same
engine in this process (``InProcessEngine``, for benchmarks), a recorded trace
(``ReplayEngine``), the scripted engine the UI tests use, and a llama-server that
kvtop attaches to (``ServerEngine``); ``runner.session.source.EngineSource`` builds
each. The app talks to all of them the same way, and asks each what it can do
(``capabilities``), never which kind it is:

* ``start()`` begins loading and returns at once; ``Loaded`` or ``LoadFailed`` follow
  as events.
* ``submit(command)`` queues a command (``runner.process.commands``) and returns at
  once: the engine runs commands one after another, in order. A new chat during a
  running turn is ``cancel`` then ``submit(Reset())``: the turn ends, then the cache
  clears, and nothing else reads the engine's replies.
* ``cancel(upto)`` stops the running turn (and queued ones up to that id) at once;
  it never waits for the engine (a stopped engine must not freeze the UI).
* ``pump(sink)`` is **the one reader**: it blocks, hands every event to ``sink`` in
  order, and returns after the engine's last event (``EngineDied`` or
  ``EngineClosed``). A second concurrent ``pump`` raises ``SecondReader``: two
  threads reading one pipe is what broke sessions before this contract existed.
* ``close(timeout)`` stops the engine for good, within ``timeout`` seconds per step.

Why commands and events, not blocking calls: a blocking ``chat()`` needs a thread that
waits for its reply, and a new chat or a restart needs another; with one reader and
queued commands, no moment of load, prefill or decode can have two.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kvtop.runner.process.commands import Cancel, Command, Load
from kvtop.runner.settings import Settings

Sink = Callable[[object], None]


class EngineUnavailable(Exception):
    """The engine could not load, or its process died; the message is for a user."""


class SecondReader(RuntimeError):
    """``pump`` was entered while another thread was reading the same engine."""


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do, declared once by the engine itself: the app branches on
    these, never on what kind of engine it is (a URL list, a ``Loaded.server``, a replay
    flag). The defaults are a model kvtop runs itself, in its child or in this process."""

    takes_input: bool = True  # False: a recording; the prompt is off and says so
    replaying: bool = False  # plays a recording: nothing is measured now (calibration,
    # CPU, TTFT, prompt-cache rates), nothing is written to a trace or a transcript
    can_restart: bool = True  # Ctrl+R (and the died dialog) makes a fresh one
    llama_buffers: bool = True  # ``Loaded.buffers`` are llama.cpp's, from kvtop's own log
    # (a llama-server's are in the server's log)
    slots: bool = False  # the server publishes its slots (a llama-server's /slots)
    polls_server: bool = False  # a running server is attached: its /metrics (and /slots) are
    # polled and the server panes show what it does for everyone
    runs_model: bool = True  # kvtop runs the model with its own settings: it reads the
    # weights, warns about memory, and its --context-shift decides a full context (a
    # llama-server runs its own; a replay shows what kvtop ran)
    second_context: bool = True  # a second context on the loaded model, beside the chat's:
    # the palette's "measure quality of the KV cache" (runner/engine/live_kld.py)
    prompt_progress: bool = True  # prefill is seen as it goes (a llama-server's prompt_progress)
    token_timings: bool = True  # the engine's own prefill and decode times per turn (llama.cpp's timings)
    kv_usage: str = "cells"  # "cells": KV use in tokens (slots, n_ctx); "fraction": a share of a block pool
    histograms: bool = False  # the server publishes latency histograms (TTFT, ITL, queue percentiles)


LOCAL = Capabilities()  # the child process, the in-process engine, a scripted test engine
SERVER = Capabilities(llama_buffers=False, slots=True, polls_server=True, runs_model=False, second_context=False)
# a server that batches requests without slots and reports its KV pool as a fraction (vLLM)
BATCHING_SERVER = Capabilities(llama_buffers=False, slots=False, polls_server=True, runs_model=False,
                               second_context=False, prompt_progress=False, token_timings=False,
                               kv_usage="fraction", histograms=True)


@runtime_checkable
class EngineClient(Protocol):
    settings: Settings
    kind: str  # "process", "in-process", "replay", "scripted", "server": the status bar names it
    capabilities: Capabilities  # what the app may ask of it (and what it must not)

    @property
    def pid(self) -> int | None: ...

    def start(self) -> None: ...

    def submit(self, command: Command) -> None: ...

    def cancel(self, upto: int) -> None: ...

    def pump(self, sink: Sink) -> None: ...

    def alive(self) -> bool: ...

    def close(self, timeout: float = 3.0) -> None: ...


class ReaderGuard:
    """Makes a second concurrent reader an error instead of a corrupted stream."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> ReaderGuard:
        if not self._lock.acquire(blocking=False):
            raise SecondReader("another thread is already reading this engine's events")
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class QueuedCommands:
    """For engines whose commands wait in ``_work`` for the thread that pumps (in this
    process, or a llama-server): ``start`` queues the load, a ``Cancel`` acts at once
    (``cancel``), anything else waits its turn. Subclasses set ``settings``, ``_work``
    and ``_closed`` and define ``cancel``."""

    settings: Settings
    _work: queue.SimpleQueue[Command]
    _closed: bool

    def alive(self) -> bool:
        return not self._closed

    def start(self) -> None:
        self._work.put(Load(self.settings))

    def submit(self, command: Command) -> None:
        if isinstance(command, Cancel):
            self.cancel(command.upto)
        else:
            self._work.put(command)

    def cancel(self, upto: int) -> None:
        raise NotImplementedError


EngineFactory = Callable[[Settings], EngineClient]
