"""The session transcript: one JSON line per completed turn, flushed and synced.

A crash of the engine, a killed UI or a power cut loses at most the turn in
flight. ``kvtop --resume`` reads the newest session with turns back (runner/records/sessions.py).

A resumed session writes the chat it restored (and a new chat or an undo before its
own first turn) only with that first turn: written at once, a ``--resume`` quit
without a turn left a second file of the same turns, and ``kvtop sessions`` listed
the chat twice. Until then the restored chat is in the file it came from.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

from kvtop.runner.redact import scrub_argv, scrub_json

if TYPE_CHECKING:
    from kvtop.runner.process.commands import ChatMessage

FORMAT_VERSION = 1


def _plain(obj: object) -> dict[str, Any]:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    raise TypeError(f"not serialisable: {type(obj).__name__}")


class Transcript:
    def __init__(self, sessions_dir: str, header: dict[str, Any]):
        from kvtop.runner.records.paths import unique_file

        self._held: list[dict[str, Any]] = []  # a resumed chat's records, written with its first turn
        stem = time.strftime("session-%Y%m%d-%H%M%S")
        self.path, self._fh = unique_file(sessions_dir, stem, "jsonl")
        header = {**header, "argv": scrub_argv(header["argv"])} if "argv" in header else header
        self._write({"type": "session", "version": FORMAT_VERSION, "started": time.time(), **header})

    def _write(self, obj: dict[str, object]) -> None:
        # no API key or URL login is written (runner/redact.py decides for every writer)
        self._fh.write(scrub_json(json.dumps(obj, default=_plain, ensure_ascii=False)) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def turn(self, user: str, assistant: str, stop_reason: str, metrics: object) -> None:
        held, self._held = self._held, []
        for record in held:
            self._write(record)
        self._write({"type": "turn", "time": time.time(), "user": user, "assistant": assistant,
                     "stop_reason": stop_reason, "metrics": metrics})

    def resumed(self, messages: Sequence[ChatMessage]) -> None:
        """The chat ``--resume`` restored, before this session's own turns: without it the
        next ``--resume`` restored only the turns after it. Held until this session's first
        turn (see above)."""
        if messages:
            self._held.append({"type": "resumed", "time": time.time(),
                               "messages": [{"role": m.role, "content": m.content} for m in messages]})

    def event(self, kind: str, **fields: object) -> None:
        record = {"type": kind, "time": time.time(), **fields}
        if self._held:  # after a resumed chat not yet written: in order, with it
            self._held.append(record)
        else:
            self._write(record)

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError:
            pass


ROLES = ("user", "assistant")


def latest_session(sessions_dir: str) -> str | None:
    """The newest transcript in the folder, known by its header (``"type": "session"``),
    not by its name: traces and other JSONL files live there too."""
    from kvtop.runner.records.paths import newest_by_header

    return newest_by_header(sessions_dir, "session", "started")


def read_messages(path: str) -> list[dict[str, str]]:
    """The chat messages of a transcript. A torn last line (power cut), bytes that are
    not UTF-8, records of unknown type and non-text fields are skipped; content is
    kept as text (never markup)."""
    messages: list[dict[str, str]] = []
    aside: list[dict[str, str]] = []  # the chat a new chat put aside, which an undo brings back
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            if obj.get("type") == "turn":
                user, reply = obj.get("user"), obj.get("assistant")
                if isinstance(user, str) and isinstance(reply, str):
                    messages.append({"role": "user", "content": user})
                    messages.append({"role": "assistant", "content": reply})
            elif obj.get("type") == "resumed" and not messages and isinstance(obj.get("messages"), list):
                messages = _resumed_messages(obj["messages"])
            elif obj.get("type") == "new_chat" and messages:
                aside, messages = messages, []
            elif obj.get("type") == "undo_new_chat" and aside:
                messages, aside = aside, messages
    return messages


def _resumed_messages(items: list[object]) -> list[dict[str, str]]:
    """A ``resumed`` record's messages: text only, in whole turns (a user message then
    its reply); anything else in the list is skipped."""
    out = [{"role": m["role"], "content": m["content"]} for m in items
           if isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)]
    kept: list[dict[str, str]] = []
    for first, second in zip(out, out[1:]):
        if (first["role"], second["role"]) == ROLES and (not kept or kept[-1] is not first):
            kept += [first, second]
    return kept
