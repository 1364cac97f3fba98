"""A server's URL and the one error every server fault becomes, below the HTTP client
(runner/server/http.py) and the credentials (runner/server/credentials.py), which both
use them: ``normalise_url`` keeps a URL's login out of what is shown, and a
``ServerError``'s message is one line for a user.
"""

from __future__ import annotations

import ipaddress
import os
import re
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

    def __init__(self, message: str, status: int | None = None, reached: bool | None = None,
                 kind: str | None = None):
        super().__init__(message)
        self.status = status
        self.reached = status is not None if reached is None else reached
        self.kind = kind  # "connect": no connection made; "timeout": a deadline passed


_HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$")


def check_url(url: str) -> str:
    """The one check of a server URL, for every command that takes one (``kvtop load``,
    ``--server``, ``estimate --server``, a server file): ``url`` as it will be used
    (``http://`` added when no scheme is given), or a ``ServerError`` in one line: a
    control character or space, a scheme other than http(s), a host that is neither a
    name nor an address, a port outside 1-65535. What is shown never holds the login."""
    text = url.strip()
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in text):
        raise ServerError(f"the URL {clean_line(no_login(text), 120)!r} has a space or a control character")
    if "://" not in text:
        text = "http://" + text
    shown = clean_line(no_login(text), 200)
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # an unclosed [, a port that is no number or out of range
        why = "the port must be a number from 1 to 65535" if "ort" in str(exc) else "the host is not valid"
        raise ServerError(f"not a server URL: {shown}: {why}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ServerError(f"not an http(s) URL: {shown}")
    if port == 0:
        raise ServerError(f"not a server URL: {shown}: the port must be a number from 1 to 65535")
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host.partition("%")[0])
        except ValueError:
            raise ServerError(f"not a server URL: {shown}: {host!r} in [ ] is not an IPv6 address") from None
    elif not _HOST.match(host):
        raise ServerError(f"not a server URL: {shown}: the host is not a name or an address")
    return text


def normalise_url(url: str) -> str:
    """``127.0.0.1:8080`` → ``http://127.0.0.1:8080``; a path or trailing slash is kept off."""
    url = check_url(url)
    parts = urlsplit(url)
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
