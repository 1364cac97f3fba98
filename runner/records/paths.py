"""Where kvtop keeps files: config, sessions, screenshots, exports, the CPU probe.

``KVTOP_HOME`` puts everything under one folder (tests and portable setups);
otherwise the platform's user directories (platformdirs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Paths:
    config_dir: str
    data_dir: str
    cache_dir: str

    @property
    def config_file(self) -> str:
        return os.path.join(self.config_dir, "config.json")

    @property
    def sessions_dir(self) -> str:
        return os.path.join(self.data_dir, "sessions")

    @property
    def screenshots_dir(self) -> str:
        return os.path.join(self.data_dir, "screenshots")

    @property
    def exports_dir(self) -> str:
        return os.path.join(self.data_dir, "exports")


def default_paths() -> Paths:
    home = os.environ.get("KVTOP_HOME")
    if home:
        return Paths(os.path.join(home, "config"), os.path.join(home, "data"), os.path.join(home, "cache"))
    from platformdirs import user_cache_dir, user_config_dir, user_data_dir

    return Paths(user_config_dir("kvtop"), user_data_dir("kvtop"), user_cache_dir("kvtop"))


def unique_file(directory: str, stem: str, ext: str) -> tuple[str, TextIO]:
    """Create a new file named by kvtop inside ``directory``; never overwrite one.

    ``stem`` is kvtop's own (a timestamp), never user text; the file is opened with
    O_EXCL, so an existing file (or a planted link) is never followed or replaced.
    """
    os.makedirs(directory, exist_ok=True)
    safe = "".join(c for c in stem if c.isalnum() or c in "-_") or "kvtop"
    for i in range(1000):
        name = f"{safe}{'' if i == 0 else f'-{i}'}.{ext}"
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        return path, os.fdopen(fd, "w", encoding="utf-8")
    raise OSError(f"no free file name for {safe}.{ext} in {directory}")


LATEST_TIME = 1e11  # seconds since 1970: the year 5138; a later time is not a time


def sane_time(v: object) -> float | None:
    """A header's recorded time when it is one (finite, from 1970 on), else None: the
    file is untrusted and a NaN, 1e999 or a 400-digit integer must not sort or crash."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int) and not 0 <= v <= LATEST_TIME:  # before float(): 10**400 overflows it
        return None
    v = float(v)
    return v if 0.0 <= v <= LATEST_TIME else None  # NaN fails both comparisons


def read_header(path: str, kind: str) -> dict[str, object] | None:
    """The first line of ``path`` when it is a JSON header of type ``kind`` (a transcript,
    ``"session"``, or a trace), else None: the sessions folder holds both, and other files."""
    import json

    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as fh:
            head = json.loads(fh.readline(1 << 20).decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    return head if isinstance(head, dict) and head.get("type") == kind else None


def newest_by_header(folder: str, kind: str, time_key: str) -> str | None:
    """The newest ``*.jsonl`` in ``folder`` whose first line is a header of type
    ``kind`` (transcripts and traces share the sessions folder: known by what they
    are, not by their names), newest by the header's ``time_key`` when sane, else by
    the file's mtime."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    best: tuple[float, str] | None = None
    for name in names:
        path = os.path.join(folder, name)
        head = read_header(path, kind) if name.endswith(".jsonl") else None
        if head is None:
            continue
        key = sane_time(head.get(time_key))
        try:
            key = os.path.getmtime(path) if key is None else key
        except OSError:
            continue
        if best is None or key > best[0]:
            best = (key, path)
    return best[1] if best else None
