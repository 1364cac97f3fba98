"""The sessions folder's transcripts, for ``kvtop sessions`` and ``kvtop --resume``.

A transcript is known by its header (``"type": "session"``), never by its name: traces
live in the same folder. Newest first by the header's start time (the file's mtime when
the header's is not a time). ``--resume`` takes the newest transcript that has turns to
restore: a launch that quit before its first turn writes a transcript too, and taking
the newest file whatever it held lost the last real chat (issue 33).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.runner.records.paths import read_header, sane_time
from kvtop.runner.records.transcript import latest_session, read_messages
from kvtop.runner.sanitize import clean_line

if TYPE_CHECKING:
    from kvtop.runner.process.commands import ChatMessage

FIRST_WORDS = 8  # of the first prompt, in the listing
FIRST_CHARS = 60
# a redacted text as runner/redact.py writes it ("<redacted: 143 chars>"): no words to show
_REDACTED = re.compile(r"^<redacted(: \d+ chars?)?>$")


@dataclass(frozen=True)
class SessionInfo:
    path: str
    started: float  # seconds since 1970: the header's start time, else the file's mtime
    model: str  # the GGUF's file name, as the header gives it ("?" when it does not)
    turns: int  # the turns ``--resume`` restores (after the last new chat)
    first_prompt: str | None  # the first restored message, None when there is none
    redacted: bool  # the session holds no conversation text to show

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def first_words(self) -> str:
        """The first prompt's first words for a listing: one line, never markup-bearing
        by itself (the caller prints it as text), "(redacted)" when it was."""
        if self.redacted:
            return "(redacted)"
        if self.first_prompt is None:
            return "(no turns)"
        words = clean_line(self.first_prompt, 10 * FIRST_CHARS).split()
        text = " ".join(words[:FIRST_WORDS])
        if len(text) > FIRST_CHARS:
            text = text[: FIRST_CHARS - 1] + "…"
        elif len(words) > FIRST_WORDS:
            text += " …"
        return text


def read_session(path: str) -> SessionInfo | None:
    """The listing's facts of one transcript; None when the file is not one (or unreadable)."""
    head = read_header(path, "session")
    if head is None:
        return None
    try:
        messages = read_messages(path)
        started = sane_time(head.get("started"))
        started = os.path.getmtime(path) if started is None else started
    except OSError:
        return None
    model = head.get("model")
    model = clean_line(os.path.basename(model) or model, 80) if isinstance(model, str) and model else "?"
    first = next((m["content"] for m in messages if m["role"] == "user"), None)
    redacted = head.get("redacted") is True or (first is not None and bool(_REDACTED.match(first.strip())))
    return SessionInfo(path, started, model, len(messages) // 2, first, redacted)


def list_sessions(sessions_dir: str, with_turns: bool = False) -> list[SessionInfo]:
    """Every transcript in ``sessions_dir``, newest first (``with_turns``: only those
    ``--resume`` can restore something from)."""
    try:
        names = os.listdir(sessions_dir)
    except OSError:
        return []
    found = []
    for name in names:
        if not name.endswith(".jsonl"):
            continue
        info = read_session(os.path.join(sessions_dir, name))
        if info is not None and (info.turns > 0 or not with_turns):
            found.append(info)
    return sorted(found, key=lambda s: (s.started, s.name), reverse=True)


def newest_with_turns(sessions_dir: str) -> SessionInfo | None:
    """What ``kvtop --resume`` reopens: the newest transcript that has turns."""
    found = list_sessions(sessions_dir, with_turns=True)
    return found[0] if found else None


def when(started: float) -> str:
    """The listing's date, in local time."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
    except (ValueError, OverflowError, OSError):
        return "????-??-?? ??:??"


def resume_last(sessions_dir: str) -> tuple[tuple[ChatMessage, ...], str]:
    """``--resume``: the messages of the newest transcript that has turns (a launch that
    quit before its first turn leaves an empty one, newer than the last real chat) and
    one line saying what was restored."""
    info = newest_with_turns(sessions_dir)
    if info is None:
        how = "no earlier session" if latest_session(sessions_dir) is None else "no earlier session with turns"
        return (), f"--resume: {how} in {clean_line(sessions_dir)}: nothing to restore"
    return _restored(info.path)


class ResumeError(ValueError):
    """``--resume FILE`` names no transcript kvtop can restore from; one line for the user."""


def resume_file(path: str, sessions_dir: str) -> tuple[tuple[ChatMessage, ...], str]:
    """``--resume FILE``: that transcript's messages (a bare name is looked for in the
    sessions folder too, as ``kvtop sessions`` lists them); ``ResumeError`` when it is
    missing, not a transcript or has nothing to restore."""
    if not os.path.exists(path) and os.path.basename(path) == path:
        path = os.path.join(sessions_dir, path)
    shown = clean_line(path)
    if not os.path.isfile(path):
        raise ResumeError(f"--resume {shown}: no such file (kvtop sessions lists the sessions)")
    if read_header(path, "session") is None:
        raise ResumeError(f"--resume {shown}: not a kvtop session transcript (kvtop sessions lists them)")
    messages, note = _restored(path)
    if not messages:
        raise ResumeError(note)
    return messages, note


def _restored(path: str) -> tuple[tuple[ChatMessage, ...], str]:
    from kvtop.runner.process.commands import ChatMessage

    try:
        messages = read_messages(path)
    except OSError as exc:
        return (), f"--resume: cannot read {clean_line(path)}: {clean_line(exc.strerror or str(exc))}"
    name = clean_line(os.path.basename(path))
    if not messages:
        return (), f"--resume: {name} has no turns after its last new chat: nothing to restore"
    turns = len(messages) // 2
    return (tuple(ChatMessage(m["role"], m["content"]) for m in messages),
            f"resumed {turns} turn{'s' if turns != 1 else ''} from {name}")
