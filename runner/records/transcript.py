"""The session transcript: one JSON line per completed turn, flushed and synced.

A crash of the engine, a killed UI or a power cut loses at most the turn in
flight. ``kvtop --resume`` reads the newest session back.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, is_dataclass

FORMAT_VERSION = 1


def _plain(obj):
    if is_dataclass(obj):
        return asdict(obj)
    raise TypeError(f"not serialisable: {type(obj).__name__}")


class Transcript:
    def __init__(self, sessions_dir: str, header: dict):
        from runner.records.paths import unique_file

        stem = time.strftime("session-%Y%m%d-%H%M%S")
        self.path, self._fh = unique_file(sessions_dir, stem, "jsonl")
        self._write({"type": "session", "version": FORMAT_VERSION, "started": time.time(), **header})

    def _write(self, obj: dict) -> None:
        self._fh.write(json.dumps(obj, default=_plain, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def turn(self, user: str, assistant: str, stop_reason: str, metrics) -> None:
        self._write({"type": "turn", "time": time.time(), "user": user, "assistant": assistant,
                     "stop_reason": stop_reason, "metrics": metrics})

    def event(self, kind: str, **fields) -> None:
        self._write({"type": kind, "time": time.time(), **fields})

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError:
            pass


def latest_session(sessions_dir: str) -> str | None:
    try:
        names = sorted(n for n in os.listdir(sessions_dir) if n.endswith(".jsonl"))
    except OSError:
        return None
    return os.path.join(sessions_dir, names[-1]) if names else None


def read_messages(path: str) -> list[dict]:
    """The chat messages of a transcript; a torn last line (power cut) is skipped."""
    messages: list[dict] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("type") == "turn":
                messages.append({"role": "user", "content": str(obj.get("user", ""))})
                messages.append({"role": "assistant", "content": str(obj.get("assistant", ""))})
            elif obj.get("type") == "new_chat":
                messages.clear()
    return messages
