"""What a debug bundle may say in public: numbers yes, the conversation and the user's
home folder no.

A Ctrl+E bundle is meant to be attached to public bug reports, so by default it keeps
everything that explains a slow turn (timings, token counts, settings, hardware, GGUF
facts, the waterfall, every engine event) and leaves out:

* conversation text: every user message, reply, the system prompt, ``-p TEXT`` and
  the cached/new text around a cache divergence become ``"<redacted: N chars>"``, so
  lengths, token counts and timings stay exact and the trace still replays; each reply
  token becomes "·" with id 0, since its id (decoded with the model's public vocabulary)
  or its length would give the reply back token by token;
* the home folder (written ``~``), the user name (``<user>``) and the host name
  (``<host>``) wherever they appear: paths in settings, argv, the model path, log
  paths, error reasons, the CPU probe's machine key, the trace header;
* secrets: an ``--api-key`` value and a URL's user:password are never written, with or
  without the text.

``Redactor`` works on plain data (the JSON forms of the bundle and the trace).

Secrets are this module's for every writer, not only the bundle: ``scrub``,
``scrub_value`` and ``scrub_argv`` are what the trace, the session file, both bundles,
the CSV, screenshots, ``kvtop bench``/``estimate`` output and the screen's
``clean_line``/``clean_text`` pass their text through (``remember_secret`` is called
where a secret enters: runner/server/credentials.py).
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

T = TypeVar("T")

NOTE = ("Redacted, safe to post: every message, reply, the system prompt and -p text is "
        "replaced by its length (\"<redacted: N chars>\"), every reply token by \"·\" with id 0; no API key "
        "or URL password; the home folder is written ~, the user name "
        "<user>, the host name <host>. Token counts, timings, settings, hardware, GGUF facts and the "
        "waterfall are exact, and 'kvtop replay' opens this file. For a bundle with the text: Ctrl+E, "
        "'With conversation text', or start kvtop with --bundle-text.")
NOTE_WITH_TEXT = ("Not redacted: this bundle holds the conversation text, the system prompt, paths and the "
                  "host name as they are. Share it only with people you trust; Ctrl+E's default bundle is "
                  "safe to post.")
TEXT_FLAGS = ("-p", "--prompt", "-sys", "--system-prompt")
SECRET_FLAGS = ("--api-key",)
SECRET = "<redacted>"
TOKEN_MARK = "·"  # every reply token's text in a redacted bundle
URL_LOGIN = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")  # http://user:password@host


def no_login(text: str) -> str:
    """A URL's user and password left out (``http://<redacted>@host``)."""
    return URL_LOGIN.sub(r"\1" + SECRET + "@", text) if "@" in text else text  # every status line passes here


# ------------------------------------------------------------ secrets, for every writer
# The API key and the URLs' passwords kvtop was given (runner/server/credentials.py takes
# them apart where they enter and hands them here). Each is kept with the forms a writer
# may turn it into (JSON and XML escapes), so a trace line, a bundle or an SVG is scrubbed
# as text. A secret shorter than MIN_SECRET is not searched for in free text (it would
# blank ordinary words); it is still kept out where it enters, and out of argv.
MIN_SECRET = 6
_secrets: list[str] = []  # longest first: a secret inside another is replaced after it


def remember_secret(value: object) -> None:
    if not isinstance(value, str) or len(value) < MIN_SECRET:
        return
    import html
    import json

    for form in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
                 html.escape(value), html.escape(value, quote=False)):
        if form not in _secrets:
            _secrets.append(form)
    _secrets.sort(key=len, reverse=True)


def forget_secrets() -> None:
    """For tests: the next test's secrets are its own."""
    _secrets.clear()


@overload
def scrub(text: str) -> str: ...
@overload
def scrub(text: T) -> T: ...
def scrub(text: object) -> object:
    """``text`` with every remembered secret ``<redacted>`` and URL logins left out: what
    every writer and the screen pass their text through (a non-string is returned as is)."""
    if not isinstance(text, str):
        return text
    return scrub_secrets(no_login(text))


def scrub_secrets(text: str) -> str:
    """Only the remembered secrets replaced: cheap enough for every redraw of a reply."""
    for form in _secrets:
        if form in text:
            text = text.replace(form, SECRET)
    return text


def scrub_json(text: str) -> str:
    """JSON text (a trace line, a report) scrubbed in its strings only: a key of digits, or
    one that spells ``null``, must not eat a number or a literal and break the file. The
    text is parsed and written again only when it held a secret (``json.dumps``'s own
    layout; ``indent`` as the text had it, when it had one)."""
    if scrub(text) == text:
        return text
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return "\n".join(scrub_json(line) for line in text.split("\n")) if "\n" in text else scrub(text)
    return json.dumps(scrub_value(data), ensure_ascii=False, indent=2 if "\n" in text.strip() else None)


_SVG_TEXT = re.compile(r">([^<]+)<")


@overload
def scrub_svg(svg: str) -> str: ...
@overload
def scrub_svg(svg: T) -> T: ...
def scrub_svg(svg: object) -> object:
    """An SVG scrubbed in its text only: coordinates and ids stay numbers and names."""
    if not isinstance(svg, str) or scrub(svg) == svg:
        return svg
    return _SVG_TEXT.sub(lambda m: ">" + scrub(m.group(1)) + "<", svg)


def scrub_value(v: object) -> Any:
    """Every string inside ``v`` (dicts, lists, keys too) scrubbed of secrets."""
    if isinstance(v, str):
        return scrub(v)
    if isinstance(v, dict):
        return {scrub(k): scrub_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [scrub_value(x) for x in v]
    return v


def scrub_argv(argv: Iterable[object] | None) -> list[object]:
    """The command line as any file may record it: ``--api-key`` values and URL logins
    left out, the text kept (``Redactor.argv`` also leaves out the text)."""
    out: list[object] = []
    hide = False
    for arg in argv or ():
        if not isinstance(arg, str):
            out.append(arg)
        elif hide:
            out.append(SECRET)
        elif arg.partition("=")[0] in SECRET_FLAGS and "=" in arg:
            out.append(arg.partition("=")[0] + "=" + SECRET)
        else:
            out.append(scrub(arg))
        hide = isinstance(arg, str) and not hide and arg in SECRET_FLAGS
    return out


# Values under these keys are the model's metadata or the records' structure, never the
# user's: a user called "llama" must not turn the architecture into "<user>".
KEEP_KEYS = frozenset((
    "type", "event", "architecture", "name", "description", "file_type", "chat_template", "template_name",
    "kind", "stop_reason", "flash_attn", "type_k", "type_v", "cache_type_k", "cache_type_v", "action",
    "cpu_name", "tflops_source", "screenshot_svg"))
# Conversation text, by record: (event or record type, field)
TEXT_FIELDS: dict[str, tuple[str, ...]] = {"TokenEvent": ("text",), "TurnDone": ("text",),
                                           "TurnStarted": ("diff_context",), "RecordedUser": ("text",)}


@overload
def redact_text(text: str) -> str: ...
@overload
def redact_text(text: T) -> T: ...
def redact_text(text: object) -> object:
    """``"<redacted: 143 chars>"``: the length, not the text ("" stays "": nothing to hide,
    and an empty token delta means an incomplete character, which replay keeps)."""
    if not isinstance(text, str):
        return text
    if text == "":
        return ""
    return f"<redacted: {len(text)} char{'' if len(text) == 1 else 's'}>"


def _word(name: str) -> re.Pattern[str] | None:
    """``name`` as a whole word (not inside another name); None when too short to tell."""
    if len(name) < 3:
        return None
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(name) + r"(?![A-Za-z0-9])")


def _component(name: str) -> re.Pattern[str] | None:
    """``name`` as a whole path component (``/mnt/alice/models``)."""
    if not name:
        return None
    return re.compile(r"(?<=[/\\])" + re.escape(name) + r"(?=[/\\]|$)")


def current_user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no user name in the environment nor in the password database
        return ""


class Redactor:
    """Scrubs the home folder, the user and host names out of strings, and the
    conversation out of bundles and traces. ``home``, ``user`` and ``host`` default to
    this machine's."""

    def __init__(self, home: str | None = None, user: str | None = None, host: str | None = None):
        home = os.path.expanduser("~") if home is None else home
        homes = {home.rstrip("/\\")}
        try:
            homes.add(os.path.realpath(home).rstrip("/\\"))
        except (OSError, ValueError):
            pass
        # longest first: /data/home/alice before /home/alice
        self.homes = sorted((h for h in homes if h and len(h) > 1), key=len, reverse=True)
        self._home_re = [re.compile(re.escape(h) + r"(?=[/\\]|$|[^A-Za-z0-9_.-])") for h in self.homes]
        user = current_user() if user is None else user
        host = platform.node() if host is None else host
        self._names: list[tuple[re.Pattern[str], str]] = []
        hosts = {host, host.split(".")[0]} if host else set()
        for name, label in [(h, "<host>") for h in sorted(hosts, key=len, reverse=True)] + [(user, "<user>")]:
            for pattern in (_word(name), _component(name)):
                if pattern is not None:
                    self._names.append((pattern, label))
        for h in hosts:  # the CPU probe's machine key (host-arch-cores): a host of any length
            self._names.append((re.compile(r"(?<![A-Za-z0-9])" + re.escape(h) + r"(?=-" + re.escape(platform.machine())
                                           + r"-\d)"), "<host>"))

    # ------------------------------------------------------------ strings
    def home(self, text: str) -> str:
        """The home folder written ``~`` (nothing else touched: safe on any text)."""
        for pattern in self._home_re:
            text = pattern.sub("~", text)
        return text

    def string(self, text: str) -> str:
        text = scrub(self.home(text))
        for pattern, label in self._names:
            text = pattern.sub(label, text)
        return text

    def value(self, v: object, key: str = "") -> Any:
        """Every string inside ``v`` scrubbed, except under ``KEEP_KEYS``; keys kept."""
        if isinstance(v, str):
            return self.home(v) if key in KEEP_KEYS else self.string(v)
        if isinstance(v, dict):
            return {k: self.value(x, str(k)) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [self.value(x, key) for x in v]
        return v

    # ------------------------------------------------------------ parts
    def argv(self, argv: Iterable[object], text: bool = False) -> list[object]:
        """The command line: ``-p``/``-sys`` values redacted (unless ``text``), the API key
        always, paths scrubbed."""
        out: list[object] = []
        hide: Callable[[str], str] | None = None
        for arg in argv:
            if not isinstance(arg, str):
                out.append(arg)
                continue
            if hide is not None:
                out.append(hide(arg))
                hide = None
                continue
            flag, eq, val = arg.partition("=")
            kind = "secret" if flag in SECRET_FLAGS else "text" if flag in TEXT_FLAGS and not text else None
            conceal: Callable[[str], str] | None = (
                (lambda _v: SECRET) if kind == "secret" else redact_text if kind == "text" else None)
            if conceal is not None and eq:
                out.append(flag + "=" + conceal(val))
            elif conceal is not None:
                out.append(arg)
                hide = conceal
            elif arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2 and not text:
                out.append("-p" + redact_text(arg[2:]))  # argparse reads -pTEXT as -p TEXT
            else:
                out.append(scrub(arg) if text else self.string(arg))
        return out

    def settings(self, settings: object) -> Any:
        out = self.value(settings)
        if isinstance(settings, dict) and "system_prompt" in settings:
            out["system_prompt"] = redact_text(settings["system_prompt"])
        return out

    def trace_header(self, header: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.value({k: v for k, v in header.items() if k not in ("argv", "settings", "host")})
        out["redacted"] = True
        out["redaction"] = NOTE
        if "argv" in header and isinstance(header["argv"], list):
            out["argv"] = self.argv(header["argv"])
        if "settings" in header:
            out["settings"] = self.settings(header["settings"])
        return out

    def trace_record(self, rec: object) -> Any:
        """One trace line (its JSON object), conversation text redacted."""
        if not isinstance(rec, dict):
            return rec
        kind = rec.get("type")
        if kind == "kvtop-trace":
            return self.trace_header(rec)
        if kind == "user":
            return {**rec, "text": redact_text(rec.get("text"))}
        if kind == "event" and isinstance(rec.get("data"), dict):
            data = self.value(rec["data"])
            for name in TEXT_FIELDS.get(str(rec.get("event")), ()):
                data[name] = _redact_any(rec["data"].get(name))
            if rec.get("event") == "TokenEvent":
                data.update(_token_left_out(rec["data"]))
            return {**rec, "data": data}
        return self.value(rec)

    def turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        """A ``TurnRecord.to_dict()``: the user's text and the divergence context redacted."""
        out: dict[str, Any] = self.value(turn)
        out["user"] = redact_text(turn.get("user"))
        out["diff_context"] = _redact_any(turn.get("diff_context"))
        return out


def _token_left_out(data: dict[str, object]) -> dict[str, object]:
    """A reply token with nothing that tells which token it was: its id is 0 (a real
    token) or stays negative (a marker, no token: replay tells them apart), and its text
    is one "·" whatever it was, so neither the vocabulary nor the lengths give it back.
    The reply's whole length stays on its TurnDone."""
    tid = data.get("token_id")
    out: dict[str, object] = {"text": TOKEN_MARK}
    if isinstance(tid, int) and not isinstance(tid, bool):
        out["token_id"] = 0 if tid >= 0 else -1
    return out


def _redact_any(v: object) -> object:
    if isinstance(v, str):
        return redact_text(v)
    if isinstance(v, (list, tuple)):
        return [_redact_any(x) for x in v]
    return v
