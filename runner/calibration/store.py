"""Calibration samples on disk: one small JSON file per model, machine and settings.

Bounded (the newest ``MAX_*`` samples of each kind), versioned (a file of another
version, or one that does not parse, is ignored and replaced), safe to delete (it is
rebuilt from the next turns), written atomically (a temporary file renamed over it),
under the cache folder: ``<cache>/calibration/v1/<key hash>.json``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from typing import TypeGuard

VERSION = 1
MAX_PREFILL = 256  # micro-batches: (tokens, depth at start, seconds)
MAX_DECODE = 128  # runs of decoded tokens: (intervals, mean depth, seconds)
MAX_OVERHEAD = 64  # seconds from submit to first token that are not prefill


@dataclass
class Samples:
    prefill: list[tuple[int, int, float]] = field(default_factory=list)
    decode: list[tuple[int, int, float]] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)
    turns: int = 0

    def add(self, other: Samples) -> None:
        self.prefill = (self.prefill + other.prefill)[-MAX_PREFILL:]
        self.decode = (self.decode + other.decode)[-MAX_DECODE:]
        self.overhead = (self.overhead + other.overhead)[-MAX_OVERHEAD:]
        self.turns += other.turns

    def empty(self) -> bool:
        return not (self.prefill or self.decode)


def _finite(x: object, lo: float = 0.0, hi: float = 1e7) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi


def _triples(raw: object) -> list[tuple[int, int, float]]:
    out: list[tuple[int, int, float]] = []
    for item in raw if isinstance(raw, list) else ():
        if (isinstance(item, list) and len(item) == 3 and _finite(item[0], 1) and _finite(item[1])
                and _finite(item[2], 1e-9)):
            out.append((int(item[0]), int(item[1]), float(item[2])))
    return out


def calibration_path(cache_dir: str, key_hash: str) -> str:
    return os.path.join(cache_dir, "calibration", f"v{VERSION}", f"{key_hash}.json")


def load_samples(path: str) -> Samples:
    """The samples in ``path``; empty when it is missing, of another version or broken."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return Samples()
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return Samples()
    overhead = [float(x) for x in data.get("overhead", []) if _finite(x, 0, 600)] \
        if isinstance(data.get("overhead"), list) else []
    turns = data.get("turns")
    return Samples(_triples(data.get("prefill"))[-MAX_PREFILL:], _triples(data.get("decode"))[-MAX_DECODE:],
                   overhead[-MAX_OVERHEAD:], int(turns) if _finite(turns, 0, 1e9) else 0)


def save_samples(path: str, key: dict[str, object], samples: Samples) -> None:
    """Write atomically; an ``OSError`` is the caller's to report (or ignore)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = {"version": VERSION, "key": key, "turns": samples.turns,
            "prefill": [list(s) for s in samples.prefill], "decode": [list(s) for s in samples.decode],
            "overhead": samples.overhead}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".calib-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
