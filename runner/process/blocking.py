"""Call-and-wait use of any engine, for ``kvtop bench``, benchmarks and engine tests.

``BlockingEngine`` starts the engine's one reader (``pump``) on a thread of its own that
only puts events in a queue; ``chat``, ``generate``, ``reset`` and ``tokenize`` submit a
command and take events off that queue until their reply comes. It is for one caller at
a time; the UI does not use it (it pumps in a worker and routes events as messages).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import cast

from kvtop.runner import events as ev
from kvtop.runner.process.commands import Chat, ChatMessage, Generate, Reset, Tokenize, as_messages
from kvtop.runner.process.contract import EngineClient, EngineUnavailable

OnEvent = Callable[[object], None]


def _ignore(_e: object) -> None:
    pass


class BlockingEngine:
    def __init__(self, client: EngineClient):
        self.client = client
        self.settings = client.settings
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._turn = 0
        self._request = 0
        self.loaded: ev.Loaded | None = None
        self.died: ev.EngineDied | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.client.pid

    def alive(self) -> bool:
        return self.client.alive()

    def start(self, on_event: OnEvent = _ignore) -> ev.Loaded:
        self.client.start()
        self._reader = threading.Thread(target=self._read, daemon=True, name="kvtop-engine-reader")
        self._reader.start()
        e = self._wait(lambda x: isinstance(x, (ev.Loaded, ev.LoadFailed)), on_event)
        if isinstance(e, ev.LoadFailed):
            self.close()
            raise EngineUnavailable(e.reason)
        self.loaded = cast(ev.Loaded, e)  # the wait took only Loaded or LoadFailed
        return self.loaded

    def _read(self) -> None:
        try:
            self.client.pump(self._events.put)
        except Exception as exc:  # the reader must always end the waiters
            self._events.put(ev.EngineDied(None, f"engine reader failed: {exc}"))

    def _wait(self, done: Callable[[object], bool], on_event: OnEvent) -> object:
        while True:
            e = self._events.get()
            on_event(e)
            if done(e):
                return e
            if isinstance(e, ev.EngineDied):
                self.died = e
                raise EngineUnavailable(e.reason)
            if isinstance(e, ev.EngineClosed):
                self._events.put(e)  # every later call fails the same way
                raise EngineUnavailable(f"the engine is {e.reason}")
            if isinstance(e, ev.EngineError):
                raise EngineUnavailable(e.reason)

    def _turn_end(self, turn_id: int) -> Callable[[object], bool]:
        return lambda e: isinstance(e, (ev.TurnDone, ev.TurnRefused)) and e.turn_id == turn_id

    def chat(self, messages: Iterable[ChatMessage | Mapping[str, object]], on_event: OnEvent = _ignore,
             t_submit: float | None = None,
             n_predict: int | None = None) -> ev.TurnDone | ev.TurnRefused:
        self._turn += 1
        self.client.submit(Chat(self._turn, as_messages(messages), t_submit or time.monotonic(), n_predict))
        return self._turn_done(on_event)

    def generate(self, tokens: Iterable[int], on_event: OnEvent = _ignore, n_predict: int = 128,
                 ignore_eog: bool = True, threads: tuple[int, int] | None = None) -> ev.TurnDone | ev.TurnRefused:
        self._turn += 1
        self.client.submit(Generate(self._turn, tuple(tokens), time.monotonic(), n_predict, ignore_eog, threads))
        return self._turn_done(on_event)

    def _turn_done(self, on_event: OnEvent) -> ev.TurnDone | ev.TurnRefused:
        done = self._wait(self._turn_end(self._turn), on_event)
        return cast("ev.TurnDone | ev.TurnRefused", done)  # what _turn_end waits for

    def reset(self, on_event: OnEvent = _ignore) -> None:
        self.client.submit(Reset())
        self._wait(lambda e: isinstance(e, ev.CacheCleared), on_event)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        self._request += 1
        rid = self._request
        self.client.submit(Tokenize(rid, text, add_special))
        e = cast(ev.Tokenized, self._wait(lambda e: isinstance(e, ev.Tokenized) and e.request_id == rid, _ignore))
        return list(e.tokens)

    def cancel(self) -> None:
        self.client.cancel(self._turn)

    def close(self, timeout: float = 3.0) -> None:
        self.client.close(timeout)
        if self._reader is not None:
            self._reader.join(timeout=2 * timeout + 1)
        died = getattr(self.client, "died", None)
        self.died = self.died or died
