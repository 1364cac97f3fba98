"""The secrets of ``kvtop --server``: the API key and a URL's ``user:password``.

They are taken apart where they enter (the command line, ``$LLAMA_API_KEY``, a
``--server-file``): the key and the login live only inside ``Credentials`` and become an
``Authorization`` header on the wire; every URL kvtop keeps, shows or records is the
one without ``user:password@``. Each secret is also handed to
``runner.redact.remember_secret``, so the one redaction module replaces it with
``<redacted>`` in anything written or drawn, should it come back some other way (a
server that echoes it in an error, a test that passes it around).

Why a class and not a string: a dataclass's ``repr`` (``AppOptions`` in a traceback, a
debug print) would show a plain string; ``Credentials`` never says what it holds.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from kvtop.runner.redact import remember_secret

if TYPE_CHECKING:
    import argparse


def split_login(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://alice:pw@host:8080/x`` → (``http://host:8080/x``, ("alice", "pw")); a URL
    without a login comes back as it is, with None. Percent-escapes in the login are
    decoded (``pw%40x`` is the password ``pw@x``); the password is remembered as a secret."""
    from kvtop.runner.server.urls import check_url

    text = check_url(url)  # a URL that is not one is a ServerError here, never a ValueError
    parts = urlsplit(text)
    if "@" not in parts.netloc:
        return url, None
    login, _, host = parts.netloc.rpartition("@")
    user, _, password = login.partition(":")
    for secret in (password, unquote(password), login, unquote(login)):
        remember_secret(secret)
    return parts._replace(netloc=host).geturl(), (unquote(user), unquote(password))


class Credentials:
    """The API key (for every server) and each server's login, by its URL without one."""

    def __init__(self, api_key: str | None = None):
        self._key = api_key or None
        remember_secret(self._key)
        self._logins: dict[str, tuple[str, str]] = {}

    def add(self, url: str) -> str:
        """``url`` normalised and without its login, which is kept for that URL."""
        from kvtop.runner.server.urls import normalise_url

        bare, login = split_login(url)
        clean = normalise_url(bare)
        if login is not None:
            self._logins[clean] = login
        return clean

    def headers(self, url: str, login: tuple[str, str] | None = None) -> dict[str, str]:
        """The ``Authorization`` header for ``url``: the API key as llama-server's Bearer
        token; else the URL's login as HTTP Basic (a proxy in front of the server). Both
        cannot go in one header: with an API key, the key wins."""
        if self._key:
            return {"Authorization": f"Bearer {self._key}"}
        login = login or self._logins.get(url)
        if login is not None:
            token = base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
            remember_secret(token)
            return {"Authorization": f"Basic {token}"}
        return {}

    def __repr__(self) -> str:
        return f"Credentials(api key {'set' if self._key else 'none'}, {len(self._logins)} login(s), hidden)"

    __str__ = __repr__


def client_auth(url: str, api_key: str | Credentials | None) -> tuple[str, dict[str, str]]:
    """(the URL to use and show, the headers) for a client of ``url``: ``api_key`` is a
    key, ``Credentials`` or None; a login in ``url`` is taken out of it here."""
    from kvtop.runner.server.urls import normalise_url

    creds = api_key if isinstance(api_key, Credentials) else Credentials(api_key)
    bare, login = split_login(url)
    clean = normalise_url(bare)
    return clean, creds.headers(clean, login)


def take_secrets(a: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``kvtop bench/estimate --server``: right after parsing, ``a.server`` loses its login
    and ``a.api_key`` (or ``$LLAMA_API_KEY``) becomes ``Credentials``, so no later
    setting, row, report or error can hold either (a bad URL is a usage error)."""
    from kvtop.runner.sanitize import clean_line
    from kvtop.runner.server.urls import ServerError, api_key_from_env

    key = a.api_key if isinstance(a.api_key, Credentials) else api_key_from_env(a.api_key)
    creds = key if isinstance(key, Credentials) else Credentials(key)
    if getattr(a, "server", None):
        try:
            a.server = creds.add(a.server)
        except ServerError as exc:
            parser.error(clean_line(str(exc)))
    a.api_key = creds
