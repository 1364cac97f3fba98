"""A server's URL and the one error every server fault becomes, below the HTTP client
(runner/server/http.py) and the credentials (runner/server/credentials.py), which both
use them: ``normalise_url`` keeps a URL's login out of what is shown, and a
``ServerError``'s message is one line for a user.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, overload
from urllib.parse import urlsplit

from kvtop.runner.redact import no_login
from kvtop.runner.sanitize import clean_line

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials


class ServerError(Exception):
    """One line for the user; ``status`` is the HTTP status when there was one.
    ``reached``: the server answered something (a status line, some bytes): a too slow,
    too large or malformed answer is a fault of that answer, not an unreachable server."""

    def __init__(self, message: str, status: int | None = None, reached: bool | None = None):
        super().__init__(message)
        self.status = status
        self.reached = status is not None if reached is None else reached


def normalise_url(url: str) -> str:
    """``127.0.0.1:8080`` → ``http://127.0.0.1:8080``; a path or trailing slash is kept off."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerError(f"not an http(s) URL: {clean_line(no_login(url))}")
    host = parts.netloc.rpartition("@")[2]  # never a user:password (runner/server/credentials.py)
    return f"{parts.scheme}://{host}{parts.path.rstrip('/')}"


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


@overload
def api_key_from_env(given: str | None) -> str | None: ...
@overload
def api_key_from_env(given: Credentials) -> Credentials: ...
def api_key_from_env(given: str | Credentials | None) -> str | Credentials | None:
    return given if given else os.environ.get("LLAMA_API_KEY") or None
