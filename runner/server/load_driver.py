"""The load generator of ``kvtop load``: concurrent streamed requests to llama-servers.

One thread per simulated user (closed loop: a user sends its next request when the last
one ends) or per arrival (``--rate``: Poisson arrivals, open loop). Each thread has its
own ``ServerClient``, because a client reads one stream at a time and ``close_stream``
ends exactly that one: ``stop()`` closes every stream in flight from any thread, and
llama-server stops each task at its next write, so a cancelled run leaves no slot busy.

Times are the client's clock (``time.monotonic``) for what a user sees (time to first
token, the gaps between tokens, the whole request) and the server's own ``timings``
(prompt_ms, predicted_ms) for how fast it computed, where the server publishes them.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtop.runner.sanitize import clean_line
from kvtop.runner.server import load_outcomes as oc
from kvtop.runner.server.http import DEADLINE_S, ServerClient, ServerError
from kvtop.runner.server.load_progress import LevelProgress
from kvtop.runner.server.load_prompts import Prompt, PromptMaker, detokenize, payload
from kvtop.runner.server.load_watch import ServerWatch
from kvtop.runner.server.load_wire import busy_slots, take_timings, tokens_in

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials

ENDPOINTS = ("completion", "chat")
QUEUE_S = 600.0  # the longest a request waits for its slot, on top of the level's --duration
MAX_IN_FLIGHT = 256  # --rate: arrivals beyond this many requests in flight wait for one to end


@dataclass
class RequestResult:
    server: int
    t_send: float
    t_end: float = 0.0
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens in it)
    ok: bool = False
    cancelled: bool = False
    error: str | None = None  # the reason, for every outcome but completed and cancelled
    outcome: str = ""  # runner/server/load_outcomes.py; "" for a result made by hand
    prompt_n: int | None = None  # the server's timings
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    cache_n: int | None = None
    draft_n: int | None = None  # a speculating server's timings: drafted, accepted
    draft_accepted: int | None = None

    @property
    def kind(self) -> str:
        """The outcome, also of a result made without one (completed, cancelled or truncated)."""
        if self.outcome:
            return self.outcome
        return oc.COMPLETED if self.ok else oc.CANCELLED if self.cancelled else oc.TRUNCATED

    def end(self, outcome: str, reason: str | None = None) -> RequestResult:
        self.outcome, self.error = outcome, reason
        self.ok, self.cancelled = outcome == oc.COMPLETED, outcome == oc.CANCELLED
        self.t_end = time.monotonic()
        return self

    @property
    def ttft_s(self) -> float | None:
        return self.chunks[0][0] - self.t_send if self.chunks else None

    @property
    def e2e_s(self) -> float:
        return self.t_end - self.t_send

    @property
    def tokens(self) -> int:
        """Generated tokens: the server's count, else the tokens the stream carried."""
        return self.predicted_n if self.predicted_n is not None else sum(k for _, k in self.chunks)

    def itls(self) -> list[float]:
        """Gaps between tokens; a chunk of k tokens spreads its gap over the k."""
        out = []
        for (t0, _), (t1, k) in zip(self.chunks, self.chunks[1:]):
            out += [(t1 - t0) / k] * k
        return out


@dataclass
class LevelRun:
    """One concurrency level (or arrival rate): its requests and what the servers said."""

    users: int | None
    rate: float | None
    results: list[RequestResult]
    t_start: float
    t_end: float
    watch: ServerWatch
    stopped: bool = False
    dead: str | None = None  # why the run ended here: a server stopped answering
    slots: list[int] | None = None  # each server's slots
    held_back: int = 0  # --rate: arrivals that waited for a request in flight to end
    restarted: str | None = None  # a server whose process changed (runner/commands/load.py)


def stream_one(client: ServerClient, server: int, endpoint: str, prompt: Prompt, n_predict: int,
               stop: threading.Event, wait_more: Callable[[float], bool] | None = None,
               on_tokens: Callable[[int], None] | None = None) -> RequestResult:
    """One streamed request and its outcome (runner/server/load_outcomes.py); ``on_tokens(k)``: each chunk."""
    path, body = payload(endpoint, prompt, n_predict)
    r = RequestResult(server, time.monotonic())
    ended = False
    try:
        for ev in client.stream_events(path, body, wait_more):
            k = tokens_in(ev, endpoint)
            if k:
                r.chunks.append((time.monotonic(), k))
                if on_tokens:
                    on_tokens(k)
            take_timings(r, ev)
            ended = ended or oc.is_stop(ev, endpoint)
            if stop.is_set():
                break
    except ServerError as exc:
        return r.end(oc.CANCELLED) if stop.is_set() else r.end(*oc.of_error(exc, r.tokens))
    if stop.is_set():
        return r.end(oc.CANCELLED)
    return r.end(*oc.of_stream(path, ended, r.tokens, n_predict, exact=r.predicted_n is not None))


class LoadDriver:
    """Sends the load; thread-safe ``stop()`` for Ctrl+C and the UI's Esc."""

    def __init__(self, urls: list[str], api_key: str | Credentials | None, prompt_tokens: int,
                 shared_prefix: int = 0,
                 endpoint: str = "completion", poll_s: float = 0.5, slots: list[int] | None = None,
                 answer_s: float = DEADLINE_S, max_in_flight: int = MAX_IN_FLIGHT, openai: list[bool] | None = None):
        """``slots``: each server's slots (the rows say how many users shared them);
        ``answer_s``: how long a request waits for its answer to begin before kvtop asks
        the server whether it is queued (then it waits on, up to ``QUEUE_S`` + --duration);
        ``openai``: each server that publishes no timings (vLLM) gets OpenAI's endpoints with usage."""
        self.urls, self.api_key, self.endpoint, self.poll_s = list(urls), api_key, endpoint, poll_s
        self.slots, self.answer_s, self.max_in_flight = slots, answer_s, max_in_flight
        self.dead: str | None = None
        self.endpoints = [f"openai-{endpoint}" if o else endpoint for o in (openai or [False] * len(self.urls))]
        self.progress: LevelProgress | None = None  # the level running (runner/server/load_progress.py)
        self.on_tick: Callable[[], None] | None = None  # called every 0.2 s while a level runs (its progress)
        self.watch: ServerWatch | None = None  # the level's, while it runs
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._clients: set[ServerClient] = set()
        self.makers = []
        for url in self.urls:
            c = ServerClient(url, api_key)
            try:
                self.makers.append(PromptMaker(c, prompt_tokens, shared_prefix))
            finally:
                c.close()

    @property
    def stopped(self) -> bool:
        return self.stop_event.is_set()

    def stop(self) -> None:
        """End every stream in flight (the server stops those tasks) and send no more."""
        self.stop_event.set()
        with self._lock:
            clients = list(self._clients)
        for c in clients:
            c.close_stream()

    def _client(self, server: int) -> ServerClient:
        c = ServerClient(self.urls[server], self.api_key, self.answer_s)
        with self._lock:
            self._clients.add(c)
        return c

    def _drop(self, c: ServerClient) -> None:
        with self._lock:
            self._clients.discard(c)
        c.close()

    def _prompt(self, client: ServerClient, server: int, key: tuple[object, ...]) -> Prompt:
        ids = self.makers[server].ids(*key)
        return detokenize(client, ids) if self.endpoint == "chat" else ids

    def one(self, client: ServerClient, server: int, key: tuple[object, ...], n_predict: int,
            queue_s: float = QUEUE_S) -> RequestResult:
        """One request; one that did not complete asks whether its server still answers
        (a dead server ends the run: ``dead``, and every stream is closed)."""
        try:
            prompt = self._prompt(client, server, key)
        except ServerError as exc:
            r = RequestResult(server, time.monotonic())
            r = r.end(oc.CANCELLED) if self.stopped else r.end(*oc.of_error(exc, 0))
        else:
            r = stream_one(client, server, self.endpoints[server], prompt, n_predict, self.stop_event,
                           self._waits_for_slot(server, queue_s), self._count)
        if r.kind in (oc.TRUNCATED, oc.TIMED_OUT, oc.UNREACHABLE) and not self.stopped:
            self._check_alive(server)
        self._count(0, 1)
        return r

    def _count(self, tokens: int, done: int = 0) -> None:
        with self._lock:
            if self.progress is not None:
                self.progress.tokens += tokens
                self.progress.done += done

    def _probe(self, server: int, path: str) -> object:
        c = ServerClient(self.urls[server], self.api_key, 3.0)
        try:
            return c.get_json(path)
        finally:
            c.close()

    def _waits_for_slot(self, server: int, queue_s: float) -> Callable[[float], bool]:
        """Whether a request with no answer yet waits on: while it is queued, and for one
        more wait after /slots first shows a slot free (the slot a request just left is
        idle until the server takes the next from its queue: on a busy machine that gap
        outlasted a probe, and a queued request was given up as it was about to start)."""
        free_seen = [0]

        def wait_more(waited: float) -> bool:
            if waited >= queue_s or self.stopped:
                return False
            free_seen[0] = 0 if self._queued(server) else free_seen[0] + 1
            return free_seen[0] <= 1

        return wait_more

    def _queued(self, server: int) -> bool:
        """Whether a request not yet begun waits for a slot: every slot busy with others
        (/slots), or /slots off but the server answers."""
        try:
            slots = self._probe(server, "/slots")
        except ServerError as exc:
            return exc.reached and exc.status != 401
        return isinstance(slots, list) and bool(slots) and \
            all(isinstance(s, dict) and s.get("is_processing") for s in slots)

    def _check_alive(self, server: int) -> None:
        try:
            self._probe(server, "/health")
        except ServerError as exc:
            if exc.reached:  # it answers, if not well (503 while loading): alive
                return
            with self._lock:
                if self.dead is None:
                    self.dead = clean_line(f"{self.urls[server]} stopped answering ({exc})", 300)
            self.stop()

    def warm_up(self, users: int, n_predict: int = 4) -> None:
        """One short request per user, not measured: the model's pages in memory, every
        connection made, every slot used once."""
        self.closed_loop(users, n_predict, 1, None, ("warmup",), measure=False)

    def closed_loop(self, users: int, n_predict: int, requests: int | None, duration: float | None,
                    key: tuple[object, ...], measure: bool = True) -> LevelRun:
        """``users`` concurrent users, each sending ``requests`` requests one after another
        (or until ``duration`` seconds have passed); user i talks to server i mod S."""
        results: list[RequestResult] = []
        watch = ServerWatch(self.urls, self.api_key, self.poll_s if measure else None)
        t0 = time.monotonic()
        self.progress = LevelProgress(users * requests if requests else None, n_predict, duration, t0) \
            if measure else None
        queue_s = QUEUE_S + (duration or 0.0)

        def user(u: int) -> None:
            server = u % len(self.urls)
            c = self._client(server)
            try:
                i = 0  # every user sends one request at least, however short --duration
                while not self.stopped and (requests is None or i < requests) and \
                        (duration is None or i == 0 or time.monotonic() - t0 < duration):
                    r = self.one(c, server, (*key, u, i), n_predict, queue_s)
                    with self._lock:
                        results.append(r)
                    i += 1
            finally:
                self._drop(c)

        self._run_threads([threading.Thread(target=user, args=(u,), daemon=True) for u in range(users)], watch)
        return LevelRun(users, None, results, t0, time.monotonic(), watch, self.stopped, self.dead,
                        self.slots)

    def open_loop(self, rate: float, n_predict: int, requests: int | None, duration: float | None,
                  key: tuple[object, ...], seed: int = 0) -> LevelRun:
        """Poisson arrivals at ``rate`` per second: ``requests`` of them, or as many as
        ``duration`` seconds bring; each runs on its own connection, whatever is in flight."""
        results: list[RequestResult] = []
        watch = ServerWatch(self.urls, self.api_key, self.poll_s)
        rng = random.Random(f"{seed}/{rate}")
        t0 = time.monotonic()
        self.progress = LevelProgress(requests, n_predict, duration, t0)
        threads: list[threading.Thread] = []
        free = threading.Semaphore(self.max_in_flight)  # one thread per request in flight, so many at most
        held = [0]

        def request(i: int) -> None:
            server = i % len(self.urls)
            c = self._client(server)
            try:
                r = self.one(c, server, (*key, i), n_predict, QUEUE_S + (duration or 0.0))
                with self._lock:
                    results.append(r)
            finally:
                self._drop(c)
                free.release()

        def arrivals() -> None:
            i, t_next = 0, t0
            while not self.stopped and (requests is None or i < requests):
                t_next += rng.expovariate(rate)
                if duration is not None and i > 0 and t_next - t0 >= duration:
                    break
                if self.stop_event.wait(max(t_next - time.monotonic(), 0.0)):
                    break
                if not free.acquire(blocking=False):
                    held[0] += 1
                    while not free.acquire(timeout=0.2):
                        if self.stopped:
                            break
                    if self.stopped:
                        break
                t = threading.Thread(target=request, args=(i,), daemon=True)
                t.start()
                threads.append(t)
                i += 1
            for t in list(threads):
                t.join()

        self._run_threads([threading.Thread(target=arrivals, daemon=True)], watch)
        return LevelRun(None, rate, results, t0, time.monotonic(), watch, self.stopped, self.dead,
                        self.slots, held[0])

    def _run_threads(self, threads: list[threading.Thread], watch: ServerWatch) -> None:
        self.watch = watch
        watch.start()
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():  # a join with a timeout, so Ctrl+C reaches the main thread
                    t.join(0.2)
                    if self.on_tick:
                        self.on_tick()
        except BaseException:
            self.stop()
            for t in threads:
                t.join(10)
            raise
        finally:
            watch.finish()

    def wait_idle(self, timeout: float = 15.0) -> bool:
        """After a stop: until no slot of any server is busy (True), or ``timeout``."""
        deadline = time.monotonic() + timeout
        clients = [ServerClient(u, self.api_key) for u in self.urls]
        try:
            while time.monotonic() < deadline:
                try:
                    if not any(busy_slots(c) for c in clients):
                        return True
                except ServerError:
                    return False
                time.sleep(0.2)
            return False
        finally:
            for c in clients:
                c.close()
