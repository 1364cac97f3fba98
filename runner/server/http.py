"""The HTTP side of ``kvtop --server``: one small client over urllib3.

Why urllib3: per-phase timeouts (connect, read) so a hanging server never hangs
kvtop, streaming responses whose socket another thread can shut down (Esc ends the
stream; llama-server then stops the task), connection pooling, an actively maintained
library that requests and pip build on, and it imports nothing of the UI (httpx
imports Rich through its command-line module, and runner/ must not). llama-server's
server-sent events are ``data: <json>`` lines, parsed here without another dependency.

Every failure becomes a ``ServerError`` whose message is one line for a user: no
traceback, and no server text interpreted as markup (the UI shows it literally).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
from typing import Iterator
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import NewConnectionError, TimeoutError as Urllib3Timeout

from runner.sanitize import clean_line

POLL_TIMEOUT = urllib3.Timeout(connect=3.0, read=5.0)
# A stream waits for its next chunk: prefill of a long prompt sends a progress chunk per
# batch, so 120 s without one means the server hangs (Esc ends it sooner).
STREAM_TIMEOUT = urllib3.Timeout(connect=5.0, read=120.0)
MAX_JSON_BYTES = 8 * 2**20


class ServerError(Exception):
    """One line for the user; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def normalise_url(url: str) -> str:
    """``127.0.0.1:8080`` → ``http://127.0.0.1:8080``; a path or trailing slash is kept off."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerError(f"not an http(s) URL: {clean_line(url)}")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def api_key_from_env(given: str | None) -> str | None:
    return given if given else os.environ.get("LLAMA_API_KEY") or None


def _describe(exc: Exception, url: str) -> str:
    if isinstance(exc, NewConnectionError) or isinstance(getattr(exc, "reason", None), NewConnectionError):
        return f"cannot reach {url}: connection refused or no route (is llama-server running?)"
    if isinstance(exc, Urllib3Timeout):
        return f"{url} did not answer in time ({type(exc).__name__})"
    return f"{url}: {clean_line(type(exc).__name__ + ': ' + str(exc), 300)}"


class ServerClient:
    """Requests to one llama-server. Thread-safe; ``close_stream`` may be called from any
    thread to end the stream another thread is reading."""

    def __init__(self, url: str, api_key: str | None = None):
        self.url = normalise_url(url)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = urllib3.PoolManager(num_pools=2, maxsize=4, retries=False, timeout=POLL_TIMEOUT)
        self._stream_lock = threading.Lock()
        self._stream = None

    def _request(self, method: str, path: str, payload: dict | None = None, timeout=POLL_TIMEOUT,
                 close: bool = False):
        headers = dict(self._headers)
        if close:  # a stream's connection is not reused: the server may close it after the stream
            headers["Connection"] = "close"
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        try:
            return self._http.request(method, self.url + path, body=body, headers=headers, timeout=timeout,
                                      preload_content=False, redirect=False)
        except Urllib3Error as exc:
            raise ServerError(_describe(exc, self.url)) from None

    def _read(self, r, path: str) -> bytes:
        try:
            data = r.read(MAX_JSON_BYTES + 1)
        except Urllib3Error as exc:
            raise ServerError(_describe(exc, self.url)) from None
        finally:
            r.release_conn()
        if len(data) > MAX_JSON_BYTES:
            raise ServerError(f"{path} answered more than {MAX_JSON_BYTES // 2**20} MiB")
        return data

    def _check(self, r, path: str, data: bytes) -> None:
        if r.status == 401:
            raise ServerError(f"{self.url} refused the API key (401): pass --api-key or set LLAMA_API_KEY", 401)
        if r.status >= 400:
            detail = ""
            try:
                body = json.loads(data)
                if isinstance(body, dict) and isinstance(body.get("error"), dict):
                    detail = ": " + clean_line(str(body["error"].get("message", "")), 200)
            except ValueError:
                pass
            raise ServerError(f"{path} answered HTTP {r.status}{detail}", r.status)

    def _json(self, method: str, path: str, payload: dict | None = None) -> object:
        r = self._request(method, path, payload)
        data = self._read(r, path)
        self._check(r, path, data)
        try:
            return json.loads(data)
        except ValueError:
            raise ServerError(f"{path} did not answer JSON: is {self.url} a llama-server?") from None

    def get_json(self, path: str) -> object:
        return self._json("GET", path)

    def post_json(self, path: str, payload: dict) -> object:
        return self._json("POST", path, payload)

    def get_text(self, path: str) -> str:
        r = self._request("GET", path)
        data = self._read(r, path)
        self._check(r, path, data)
        return data.decode("utf-8", errors="replace")

    def stream_events(self, path: str, payload: dict) -> Iterator[dict]:
        """The JSON objects of a server-sent-events stream, until ``[DONE]`` or the end.
        A chunk that is not a JSON object raises ``ServerError`` naming it."""
        r = self._request("POST", path, payload, timeout=STREAM_TIMEOUT, close=True)
        if r.status >= 400:
            self._check(r, path, self._read(r, path))
        with self._stream_lock:
            self._stream = r
        try:
            for line in _lines(r, self.url):
                if not line.startswith("data:"):
                    continue  # comments, "event:" lines, keep-alive
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                yield _event(data, path)
        finally:
            with self._stream_lock:
                self._stream = None
            r.close()

    def close_stream(self) -> None:
        """End the stream being read (cancel): the server sees the client go and stops.
        The socket is shut down, which wakes a read blocked in another thread."""
        with self._stream_lock:
            r = self._stream
        if r is None:
            return
        sock = _socket_of(r)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the reader blocked in recv
            except OSError:
                pass
            try:
                # Close it now with a reset: the server stops the task at its next write. A
                # plain close waits for the last reference (the response's file), and until
                # then the server's writes still succeed and it generates on.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                os.close(sock.detach())
            except OSError:
                pass
        try:
            r.close()
        except Exception:
            pass

    def close(self) -> None:
        self.close_stream()
        self._http.clear()


def _socket_of(r):
    """The socket under a streamed response. With ``Connection: close`` http.client hands
    the socket to the response's file and forgets it on the connection, so look there."""
    sock = getattr(getattr(r, "connection", None), "sock", None)
    if sock is None:
        raw = getattr(getattr(getattr(r, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    return sock


def _lines(r, url: str) -> Iterator[str]:
    buf = b""
    try:
        # chunk by chunk as they arrive (a plain read(4096) would wait for 4 KiB of tokens)
        chunks = r.stream(4096, decode_content=True) if r.chunked else iter(lambda: r.read1(4096), b"")
        for chunk in chunks:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.rstrip(b"\r").decode("utf-8", errors="replace")
            if len(buf) > MAX_JSON_BYTES:
                raise ServerError(f"{url} sent a line over {MAX_JSON_BYTES // 2**20} MiB")
    except (Urllib3Error, OSError, ValueError, AttributeError) as exc:
        raise ServerError(_describe(exc, url)) from None
    if buf:
        yield buf.decode("utf-8", errors="replace")


def _event(data: str, path: str) -> dict:
    try:
        obj = json.loads(data)
    except ValueError:
        raise ServerError(f"{path} sent a chunk that is not JSON: {clean_line(data, 80)}") from None
    if not isinstance(obj, dict):
        raise ServerError(f"{path} sent a chunk that is not a JSON object")
    if "error" in obj and not obj.get("choices"):
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise ServerError(f"the server reported an error: {clean_line(str(msg), 300)}")
    return obj
