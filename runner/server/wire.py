"""The bytes of one HTTP exchange with a server, each bounded in time and size.

urllib3's (and the socket module's) timeout is per read: a server that sends one byte
every 2 s never times out, and kvtop hung on it (issue 21). Here a connection's socket
carries a *deadline*, a moment on the monotonic clock: every read and write is given
only the time left, so connect + headers + the whole body end by it however the server
trickles. ``http.client`` does the HTTP (status line, headers, chunked bodies) through
that socket, so nothing of the protocol is written again here.

JSON from a server is parsed with a depth limit: Python's decoder raises
``RecursionError`` on a 100,000-deep array, and a shallower one can still overflow a
later ``str()``. ``loads_bounded`` refuses anything deeper than ``MAX_DEPTH`` before it
decodes (``json_depth``: a few C-level passes, 20 ms for 9.5 MB).
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import struct
import threading
import time
from array import array
from itertools import accumulate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer


class TooSlow(Exception):
    """The deadline passed while waiting for the server (not an OSError: http.client
    must not mistake it for a connection it may retry)."""


class DeadlineSocket:
    """A connected socket whose reads and writes end by ``deadline`` (monotonic seconds),
    which the client moves for each request or stream event. ``received`` counts every
    byte read, for the "sent 12 bytes in 10 s" line."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self.deadline = float("inf")
        self.received = 0
        self._files = 0  # open response files: the socket closes when the last one does
        self._closing = False
        self._lock = threading.Lock()  # ``wake`` (another thread) never meets a close half done

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TooSlow()
        self._sock.settimeout(left)

    def recv_into(self, buf: WriteableBuffer, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        try:
            n = self._sock.recv_into(buf, nbytes, flags)
        except TimeoutError:
            if time.monotonic() >= self.deadline:
                raise TooSlow() from None
            raise
        self.received += n
        return n

    def recv(self, n: int, flags: int = 0) -> bytes:
        buf = bytearray(n)
        got = self.recv_into(buf, n, flags)
        return bytes(buf[:got])

    def sendall(self, data: ReadableBuffer, flags: int = 0) -> None:
        self._arm()  # since Python 3.5 the timeout bounds the whole sendall
        try:
            self._sock.sendall(data, flags)
        except TimeoutError:
            raise TooSlow() from None

    def makefile(self, mode: str = "rb", buffering: int | None = None, **_kw: object) -> io.BufferedReader:
        # http.client reads the response through this file: every read comes back here
        self._files += 1
        # a stand-in for the socket: SocketIO calls only recv_into, sendall and _decref_socketios
        raw = socket.SocketIO(self, "rb")  # type: ignore[arg-type]
        return io.BufferedReader(raw, buffering or io.DEFAULT_BUFFER_SIZE)

    def _decref_socketios(self) -> None:
        self._files -= 1
        if self._closing and self._files <= 0:
            self._close()

    def _close(self) -> None:
        with self._lock:
            self._sock.close()

    def abort(self) -> None:
        """Close now, files or not: the exchange failed and nothing will read on."""
        self._closing = True
        self._close()

    def wake(self) -> None:
        """From another thread: end the exchange another thread is reading, at once, and
        leave the closing to that reader. The socket is shut down (a read blocked in it
        returns, and so does the next one) and set to reset when it closes (the server
        stops at its next write instead of generating on). Closing it here instead freed
        its number while the reader may already have taken it for its next ``poll``
        (CPython reads it with the GIL held, then waits without it): the reader then waited
        on whatever socket took that number next, until its deadline."""
        with self._lock:
            if self._sock.fileno() < 0:
                return  # the reader has closed it: nothing to wake
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass  # already reset by the server: the reader's read returns anyway

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        """As a socket's close: a response still reading (``Connection: close`` hands the
        socket to it) keeps it open until its file closes."""
        self._closing = True
        if self._files <= 0:
            self._close()

    def __getattr__(self, name: str) -> Any:  # setsockopt, shutdown, detach, …
        return getattr(self._sock, name)


class _Deadlined:
    """Mixed into http.client's connections: the connected socket becomes a DeadlineSocket."""

    sock: Any  # http.client's socket, then the DeadlineSocket around it

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # a mixin: the http.client class after it in the MRO connects
        self.sock = DeadlineSocket(self.sock)


class HTTPConnection(_Deadlined, http.client.HTTPConnection):
    pass


class HTTPSConnection(_Deadlined, http.client.HTTPSConnection):
    pass


def open_connection(scheme: str, host: str, port: int | None, connect_s: float) -> http.client.HTTPConnection:
    """A connection, not yet connected; ``connect_s`` bounds the TCP (and TLS) connect."""
    cls = HTTPSConnection if scheme == "https" else HTTPConnection
    return cls(host, port, timeout=connect_s)


# ---------------------------------------------------------------- JSON with a depth limit

MAX_DEPTH = 64  # llama-server's answers nest 4 deep; 64 is far above, and far below the recursion limit
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes


class TooDeep(ValueError):
    pass


def json_depth(data: bytes) -> int:
    """How deep ``data`` nests brackets (those inside strings do not count), in C-level
    passes: escapes out, then every other piece between quotes (the strings), brackets
    kept as +1/-1 and summed as they come."""
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    steps = array("b")
    steps.frombytes(b"".join(unescaped.split(b'"')[::2]).translate(_STEP, _NOT_BRACKET))
    return max(accumulate(steps), default=0)


def json_depth_ok(data: bytes, limit: int = MAX_DEPTH) -> bool:
    return json_depth(data) <= limit


def loads_bounded(data: bytes | str, limit: int = MAX_DEPTH) -> object:
    """``json.loads`` that refuses nesting deeper than ``limit`` (``TooDeep``, a
    ValueError) and never lets ``RecursionError`` out."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if not json_depth_ok(raw, limit):
        raise TooDeep(f"JSON nested more than {limit} deep")
    try:
        return json.loads(raw)
    except RecursionError:
        raise TooDeep(f"JSON nested more than {limit} deep") from None
