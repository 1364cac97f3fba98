"""The HTTP side of ``kvtop --server``: one small client over ``http.client``.

Every exchange has a *total* deadline (``wire.DeadlineSocket``): connect, headers and
the whole body end by it, however slowly the server trickles (urllib3's timeout was per
read, and a server sending a byte every 2 s hung kvtop). A stream has a deadline per
event and one on progress: an event that has begun must end within ``STREAM_EVENT_S``,
and the next one must come within ``STREAM_GAP_S``. Bodies are bounded while they are
read, JSON is parsed with a depth limit (``wire.loads_bounded``), and connections are
kept alive between polls (one handshake per server, not one per request).
llama-server's server-sent events are ``data: <json>`` lines, parsed here.

Every failure becomes a ``ServerError`` whose message is one line for a user: no
traceback, and no server text interpreted as markup (the UI shows it literally).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from kvtop.runner.sanitize import clean_line
from kvtop.runner.server.urls import ServerError as ServerError  # re-exported: the client's error
from kvtop.runner.server.wire import DeadlineSocket, TooDeep, TooSlow, loads_bounded, open_connection

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials

CONNECT_S = 3.0  # TCP (and TLS) connect
DEADLINE_S = 10.0  # one whole request: connect, headers and body
# A stream's first event may wait for a free slot (the server defers the request), and
# prefill of a long prompt sends a progress event per batch: 120 s without one is a hang.
STREAM_GAP_S = 120.0
STREAM_EVENT_S = 10.0  # a server writes each event at once: one that trickles is a slow-loris
MAX_JSON_BYTES = 32 * 2**20  # 100,000 small slots are 9.5 MB: large, still an answer
MAX_LINE_BYTES = 8 * 2**20  # one event of a stream
MAX_STREAM_BYTES = 256 * 2**20
KEEP_ALIVE = 2  # idle connections kept per server


def _connect_error(exc: Exception, url: str) -> ServerError:
    if isinstance(exc, socket.gaierror):
        return ServerError(f"cannot reach {url}: unknown host", kind="connect")
    if isinstance(exc, (socket.timeout, TooSlow)):
        return ServerError(f"cannot reach {url}: no answer to connect in {CONNECT_S:g} s", kind="connect")
    return ServerError(f"cannot reach {url}: connection refused or no route (is llama-server running?)",
                       kind="connect")


def _broken(exc: Exception, path: str, got: int) -> ServerError:
    """A connection that broke during an exchange, in one line."""
    what = clean_line(f"{type(exc).__name__}: {exc}", 160) if str(exc) else type(exc).__name__
    return ServerError(f"{path}: the answer broke off after {got} bytes ({what})", reached=got > 0)


def _drop(conn: http.client.HTTPConnection, sock: DeadlineSocket) -> None:
    """Close a connection and its socket now (http.client leaves the socket to a response
    that may never be read to its end)."""
    conn.close()
    sock.abort()


def _socket(conn: http.client.HTTPConnection) -> DeadlineSocket:
    """The connected socket: wire's connections wrap it (``_Deadlined.connect``)."""
    return cast(DeadlineSocket, conn.sock)


_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class ServerClient:
    """Requests to one llama-server. Thread-safe; ``close_stream`` may be called from any
    thread to end the stream another thread is reading."""

    def __init__(self, url: str, api_key: str | Credentials | None = None, deadline_s: float | None = None):
        from kvtop.runner.server.credentials import client_auth

        # api_key: a key, runner.server.credentials.Credentials or None. The key and a URL's
        # login go into the header only: self.url is the one shown and recorded.
        self.url, self._headers = client_auth(url, api_key)
        parts = urlsplit(self.url)
        self._where = (parts.scheme, parts.hostname or "", parts.port)  # normalise_url: it has a host
        self._base = parts.path
        self.deadline_s = DEADLINE_S if deadline_s is None else deadline_s
        self._lock = threading.Lock()
        self._idle: list[http.client.HTTPConnection] = []  # kept-alive connections
        self._stream: DeadlineSocket | None = None  # the socket of the stream being read

    # ------------------------------------------------------------ plain requests
    def _connect(self, deadline: float) -> http.client.HTTPConnection:
        conn = open_connection(*self._where, max(min(CONNECT_S, deadline - time.monotonic()), 0.05))
        try:
            conn.connect()
        except (OSError, TooSlow) as exc:
            conn.close()
            raise _connect_error(exc, self.url) from None
        return conn

    def _take(self, deadline: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connect(deadline), False

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < KEEP_ALIVE:
                self._idle.append(conn)
                return
        conn.close()

    def _body(self, payload: Mapping[str, object] | None) -> tuple[bytes | None, dict[str, str]]:
        headers = dict(self._headers)
        if payload is None:
            return None, headers
        headers["Content-Type"] = "application/json"
        return json.dumps(payload).encode(), headers

    def _exchange(self, method: str, path: str, payload: Mapping[str, object] | None = None,
                  limit: int = MAX_JSON_BYTES) -> tuple[int, bytes, http.client.HTTPMessage]:
        """(status, body, headers) of one request, all of it within ``deadline_s``. A kept-alive
        connection the server has closed meanwhile is retried once on a new one."""
        body, headers = self._body(payload)
        deadline = time.monotonic() + self.deadline_s
        while True:
            conn, reused = self._take(deadline)
            sock = _socket(conn)
            sock.deadline, before = deadline, sock.received
            try:
                conn.request(method, self._base + path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read(limit + 1)
            except TooSlow:
                _drop(conn, sock)
                got = sock.received - before
                if not got:
                    raise ServerError(f"{path} did not answer in {self.deadline_s:g} s", kind="timeout") from None
                raise ServerError(f"{path} sent {got} bytes in {self.deadline_s:g} s: too slow", reached=True,
                                  kind="timeout") from None
            except _STALE as exc:
                _drop(conn, sock)
                if reused and sock.received == before:
                    continue  # the server closed the idle connection: once more on a new one
                raise _broken(exc, path, sock.received - before) from None
            except (OSError, http.client.HTTPException, ValueError) as exc:
                _drop(conn, sock)
                raise _broken(exc, path, sock.received - before) from None
            if len(data) > limit:
                _drop(conn, sock)
                raise ServerError(f"{path} answered more than {limit // 2**20} MiB: too large to read",
                                  r.status) from None
            if r.isclosed() and not r.will_close:
                self._give(conn)
            else:
                _drop(conn, sock)
            return r.status, data, r.msg

    def _check(self, status: int, path: str, data: bytes) -> None:
        if status == 401:
            raise ServerError(f"{self.url} refused the API key (401): pass --api-key or set LLAMA_API_KEY", 401)
        if 300 <= status < 400:
            raise ServerError(f"{path} answered HTTP {status}, a redirect: kvtop does not follow redirects "
                              f"(give the server's own URL)", status)
        if status >= 400:
            detail = ""
            try:
                body = loads_bounded(data)
                if isinstance(body, dict) and isinstance(body.get("error"), dict):
                    detail = ": " + clean_line(str(body["error"].get("message", "")), 200)
            except ValueError:
                pass
            raise ServerError(f"{path} answered HTTP {status}{detail}", status)

    def _json(self, method: str, path: str, payload: Mapping[str, object] | None = None) -> object:
        status, data, _ = self._exchange(method, path, payload)
        self._check(status, path, data)
        try:
            return loads_bounded(data)
        except TooDeep as exc:
            raise ServerError(f"{path} answered {exc}: refused", status) from None
        except ValueError:
            raise ServerError(f"{path} did not answer JSON: is {self.url} a llama-server?", status) from None

    def get_json(self, path: str) -> object:
        return self._json("GET", path)

    def post_json(self, path: str, payload: Mapping[str, object]) -> object:
        return self._json("POST", path, payload)

    def get_text(self, path: str) -> str:
        return self.get_text_and_header(path, "")[0]

    def get_text_and_header(self, path: str, header: str) -> tuple[str, str | None]:
        """The text ``get_text`` reads and the value of one response header (None when it
        was not sent): llama-server's ``Process-Start-Time-Unix`` on ``/metrics``."""
        status, data, headers = self._exchange("GET", path)
        self._check(status, path, data)
        return data.decode("utf-8", errors="replace"), headers.get(header) if header else None

    # ------------------------------------------------------------ streams
    def stream_events(self, path: str, payload: Mapping[str, object],
                      wait_more: Callable[[float], bool] | None = None) -> Iterator[dict[str, Any]]:
        """The JSON objects of a server-sent-events stream, until ``[DONE]`` or the end.
        A chunk that is not a JSON object raises ``ServerError`` naming it. A server that
        has not begun its answer in ``deadline_s`` is given another ``deadline_s`` each
        time ``wait_more(seconds waited)`` says so (a request queued for a slot)."""
        body, headers = self._body(payload)
        headers["Connection"] = "close"  # the server may close it after the stream: not reused
        conn = self._connect(time.monotonic() + CONNECT_S)
        sock = _socket(conn)
        # llama-server (b0.3.36) sends no headers before a queued request gets its slot: the
        # wait for the answer's first byte is the queue's, and ``wait_more`` decides how long
        t0 = time.monotonic()
        sock.deadline = t0 + self.deadline_s
        with self._lock:
            self._stream = sock
        try:
            try:
                conn.request("POST", self._base + path, body=body, headers=headers)
                r = _response(conn, sock, path, self.deadline_s, wait_more, t0)
            except TooSlow:  # sending the request
                raise ServerError(f"{path} did not start its answer in {self.deadline_s:g} s",
                                  kind="timeout") from None
            except (OSError, http.client.HTTPException, ValueError) as exc:
                raise _broken(exc, path, sock.received) from None
            if r.status >= 300:
                sock.deadline = time.monotonic() + self.deadline_s
                try:
                    data = r.read(MAX_JSON_BYTES + 1)
                except (TooSlow, OSError, http.client.HTTPException, ValueError):
                    data = b""
                self._check(r.status, path, data)
            for line in _lines(r, sock, path):
                if not line.startswith("data:"):
                    continue  # comments, "event:" lines, keep-alive
                text = line[5:].strip()
                if text == "[DONE]":
                    return
                yield _event(text, path)
        finally:
            with self._lock:
                self._stream = None
            _drop(conn, sock)

    def close_stream(self) -> None:
        """End the stream being read (cancel): the server sees the client go and stops.
        The socket is shut down and set to reset (``DeadlineSocket.wake``), which wakes
        the reader blocked in another thread; that reader closes it."""
        with self._lock:
            sock = self._stream
        if sock is not None:
            sock.wake()

    def close(self) -> None:
        self.close_stream()
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _response(conn: http.client.HTTPConnection, sock: DeadlineSocket, path: str, deadline_s: float,
              wait_more: Callable[[float], bool] | None, t0: float) -> http.client.HTTPResponse:
    """The response's status and headers, waiting on while ``wait_more`` allows. A wait
    that passed with no byte read leaves the connection as it was: getresponse again."""
    waits = 0
    while True:
        try:
            return conn.getresponse()
        except TooSlow:
            if sock.received or wait_more is None or not wait_more(time.monotonic() - t0):
                took = f"{deadline_s:g} s" if not waits else f"{time.monotonic() - t0:.0f} s, queued"
                raise ServerError(f"{path} did not start its answer in {took}", kind="timeout") from None
            waits += 1
            sock.deadline = time.monotonic() + deadline_s


def _lines(r: http.client.HTTPResponse, sock: DeadlineSocket, path: str) -> Iterator[str]:
    """The lines of a stream as they arrive. Before each read the socket gets its
    deadline: the end of the event begun (``STREAM_EVENT_S`` after its first byte), or
    ``STREAM_GAP_S`` after the last whole event."""
    buf = bytearray()
    total, t_event, t_begun = 0, time.monotonic(), None
    try:
        while True:
            sock.deadline = t_begun + STREAM_EVENT_S if t_begun is not None else t_event + STREAM_GAP_S
            chunk = r.read1(65536)  # as they arrive (a plain read(4096) would wait for 4 KiB of tokens)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_STREAM_BYTES:
                raise ServerError(f"{path} streamed more than {MAX_STREAM_BYTES // 2**20} MiB", reached=True)
            start = len(buf)
            buf += chunk
            end = buf.rfind(b"\n", start)
            if end >= 0:
                lines, buf = bytes(buf[:end]).split(b"\n"), buf[end + 1:]
                for line in lines:
                    yield line.rstrip(b"\r").decode("utf-8", errors="replace")
                t_event = time.monotonic()
                t_begun = t_event if buf else None
            elif t_begun is None:
                t_begun = time.monotonic()
            if len(buf) > MAX_LINE_BYTES:
                raise ServerError(f"{path} sent a line over {MAX_LINE_BYTES // 2**20} MiB", reached=True)
    except TooSlow:
        if buf:
            raise ServerError(f"{path} sent {len(buf)} bytes of an event in {STREAM_EVENT_S:g} s: too slow",
                              reached=True, kind="timeout") from None
        raise ServerError(f"{path} sent nothing for {STREAM_GAP_S:g} s", reached=True, kind="timeout") from None
    except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
        raise _broken(exc, path, total) from None
    if buf:
        yield bytes(buf).decode("utf-8", errors="replace")


def _event(data: str, path: str) -> dict[str, Any]:
    try:
        obj = loads_bounded(data)
    except TooDeep as exc:
        raise ServerError(f"{path} sent a chunk {exc}") from None
    except ValueError:
        raise ServerError(f"{path} sent a chunk that is not JSON: {clean_line(data, 80)}") from None
    if not isinstance(obj, dict):
        raise ServerError(f"{path} sent a chunk that is not a JSON object")
    if "error" in obj and not obj.get("choices"):
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise ServerError(f"the server reported an error: {clean_line(str(msg), 300)}")
    return obj
