"""The HTTP side of ``kvtop --server``: one small client over httpx.

Why httpx: per-phase timeouts (connect, read, write, pool) so a hanging server never
hangs kvtop, streaming responses that another thread can close (Esc closes the stream;
llama-server then stops the task), and an actively maintained library. llama-server's
server-sent events are ``data: <json>`` lines, parsed here without another dependency.

Every failure becomes a ``ServerError`` whose message is one line for a user: no
traceback, and no server text interpreted as markup (the UI shows it literally).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Iterator
from urllib.parse import urlsplit

import httpx

from runner.sanitize import clean_line

POLL_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
# A stream waits for its next chunk: prefill of a long prompt sends a progress chunk per
# batch, so 120 s without one means the server hangs (Esc ends it sooner).
STREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=30.0, pool=5.0)
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
    if isinstance(exc, httpx.ConnectError):
        return f"cannot reach {url}: connection refused or no route (is llama-server running?)"
    if isinstance(exc, httpx.TimeoutException):
        return f"{url} did not answer in time ({type(exc).__name__})"
    return f"{url}: {clean_line(type(exc).__name__ + ': ' + str(exc), 300)}"


class ServerClient:
    """Requests to one llama-server. Thread-safe; ``close_stream`` may be called from any
    thread to end the stream another thread is reading."""

    def __init__(self, url: str, api_key: str | None = None):
        self.url = normalise_url(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=POLL_TIMEOUT,
                                  follow_redirects=False, trust_env=False)
        self._stream_lock = threading.Lock()
        self._stream: httpx.Response | None = None

    def _check(self, r: httpx.Response, path: str) -> None:
        if r.status_code == 401:
            raise ServerError(f"{self.url} refused the API key (401): pass --api-key or set LLAMA_API_KEY", 401)
        if r.status_code >= 400:
            detail = ""
            try:
                body = r.json() if int(r.headers.get("content-length") or 0) < MAX_JSON_BYTES else None
                if isinstance(body, dict) and isinstance(body.get("error"), dict):
                    detail = ": " + clean_line(str(body["error"].get("message", "")), 200)
            except ValueError:
                pass
            raise ServerError(f"{path} answered HTTP {r.status_code}{detail}", r.status_code)

    def get_json(self, path: str) -> object:
        try:
            r = self._http.get(path)
        except httpx.HTTPError as exc:
            raise ServerError(_describe(exc, self.url)) from None
        self._check(r, path)
        try:
            return r.json()
        except ValueError:
            raise ServerError(f"{path} did not answer JSON: is {self.url} a llama-server?") from None

    def get_text(self, path: str) -> str:
        try:
            r = self._http.get(path)
        except httpx.HTTPError as exc:
            raise ServerError(_describe(exc, self.url)) from None
        self._check(r, path)
        return r.text[:MAX_JSON_BYTES]

    def post_json(self, path: str, payload: dict) -> object:
        try:
            r = self._http.post(path, json=payload)
        except httpx.HTTPError as exc:
            raise ServerError(_describe(exc, self.url)) from None
        self._check(r, path)
        try:
            return r.json()
        except ValueError:
            raise ServerError(f"{path} did not answer JSON") from None

    def stream_events(self, path: str, payload: dict) -> Iterator[dict]:
        """The JSON objects of a server-sent-events stream, until ``[DONE]`` or the end.
        A chunk that is not a JSON object raises ``ServerError`` naming it."""
        try:
            with self._http.stream("POST", path, json=payload, timeout=STREAM_TIMEOUT) as r:
                with self._stream_lock:
                    self._stream = r
                if r.status_code >= 400:
                    r.read()
                    self._check(r, path)
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue  # comments, "event:" lines, keep-alive
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
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
                    yield obj
        except httpx.HTTPError as exc:
            raise ServerError(_describe(exc, self.url)) from None
        finally:
            with self._stream_lock:
                self._stream = None

    def close_stream(self) -> None:
        """End the stream being read (cancel): the server sees the client go and stops."""
        with self._stream_lock:
            r = self._stream
        if r is not None:
            try:
                r.close()
            except Exception:
                pass

    def close(self) -> None:
        self.close_stream()
        self._http.close()
