"""Calibration samples on disk: one small JSON file per model, machine and settings.

Bounded (the newest ``MAX_*`` samples of each kind), versioned (a file of another
version, or one that does not parse, is ignored and replaced), safe to delete (it is
rebuilt from the next turns), written atomically (a temporary file renamed over it),
under the cache folder: ``<cache>/calibration/v2/<key hash>.json``.

Version 2: each sample keeps the cores other processes held while it ran (None: not
seen, a server elsewhere) and the threads it ran on (0: the engine's own), so a busy
turn calibrates too, priced at its own load (runner.calibration.pace); and each turn
forecast from a calibration keeps how far its forecast was off (``residuals``: the
forecast's interval, runner.calibration.interval).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from typing import TypeGuard

VERSION = 2
MAX_PREFILL = 256  # micro-batches: (tokens, depth at start, seconds, others' cores, threads)
MAX_DECODE = 128  # runs of decoded tokens: (intervals, mean depth, seconds, others' cores, threads)
MAX_OVERHEAD = 64  # seconds from submit to first token that are not prefill
MAX_RESIDUALS = 48  # (log TTFT measured/forecast, log decode, log of the load's price)
MAX_HELD = 48  # (others' cores before a turn, held through it, decode threads, prefill threads)

Sample = tuple[int, int, float, float | None, int]
Residual = tuple[float | None, float | None, float]
Held = tuple[float, float, int, int]


def as_sample(item: tuple[int, int, float] | Sample) -> Sample:
    """A sample of either length: a bare (tokens, depth, seconds) ran quietly on the engine's threads."""
    if len(item) == 5:
        return item
    return (int(item[0]), int(item[1]), float(item[2]), 0.0, 0)


@dataclass
class Samples:
    prefill: list[Sample] = field(default_factory=list)
    decode: list[Sample] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)
    turns: int = 0
    overhead_load: list[float | None] = field(default_factory=list)  # others' cores, beside ``overhead``
    residuals: list[Residual] = field(default_factory=list)
    n_cores: int = 0  # the machine's cores the loads are out of (0: not known)
    held: list[Held] = field(default_factory=list)  # what a load read before a turn held through it

    def __post_init__(self) -> None:
        self.prefill = [as_sample(x) for x in self.prefill]
        self.decode = [as_sample(x) for x in self.decode]
        self.overhead_load = (self.overhead_load + [0.0] * len(self.overhead))[:len(self.overhead)]

    def add(self, other: Samples) -> None:
        self.prefill = (self.prefill + other.prefill)[-MAX_PREFILL:]
        self.decode = (self.decode + other.decode)[-MAX_DECODE:]
        self.overhead_load = (self.overhead_load + other.overhead_load)[-MAX_OVERHEAD:]
        self.overhead = (self.overhead + other.overhead)[-MAX_OVERHEAD:]
        self.residuals = (self.residuals + other.residuals)[-MAX_RESIDUALS:]
        self.held = (self.held + other.held)[-MAX_HELD:]
        self.turns += other.turns
        self.n_cores = other.n_cores or self.n_cores

    def empty(self) -> bool:
        return not (self.prefill or self.decode)


def _finite(x: object, lo: float = 0.0, hi: float = 1e7) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi


def _load(x: object) -> float | None:
    return float(x) if _finite(x, 0, 4096) else None


def _samples(raw: object) -> list[Sample]:
    out: list[Sample] = []
    for item in raw if isinstance(raw, list) else ():
        if (isinstance(item, list) and len(item) == 5 and _finite(item[0], 1) and _finite(item[1])
                and _finite(item[2], 1e-9) and _finite(item[4], 0, 4096)):
            out.append((int(item[0]), int(item[1]), float(item[2]), _load(item[3]), int(item[4])))
    return out


def _residuals(raw: object) -> list[Residual]:
    out: list[Residual] = []
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, list) and len(item) == 3 and _finite(item[2], 0, 20):
            r = [float(x) if _finite(x, -20, 20) else None for x in item[:2]]
            if r[0] is not None or r[1] is not None:
                out.append((r[0], r[1], float(item[2])))
    return out


def _held(raw: object) -> list[Held]:
    """The (before, through, threads, threads_batch) pairs that parse (a file written
    before they were kept has none)."""
    out: list[Held] = []
    for x in raw if isinstance(raw, list) else []:
        if (isinstance(x, list) and len(x) == 4 and _finite(x[0], 0, 1e6) and _finite(x[1], 0, 1e6)
                and all(isinstance(t, int) and 0 <= t < 100_000 for t in x[2:])):
            out.append((float(x[0]), float(x[1]), int(x[2]), int(x[3])))
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
    raw = data.get("overhead")
    pairs = [x for x in raw if isinstance(x, list) and len(x) == 2 and _finite(x[0], 0, 600)] \
        if isinstance(raw, list) else []
    turns, cores = data.get("turns"), data.get("n_cores")
    return Samples(_samples(data.get("prefill"))[-MAX_PREFILL:], _samples(data.get("decode"))[-MAX_DECODE:],
                   [float(x[0]) for x in pairs][-MAX_OVERHEAD:], int(turns) if _finite(turns, 0, 1e9) else 0,
                   [_load(x[1]) for x in pairs][-MAX_OVERHEAD:], _residuals(data.get("residuals"))[-MAX_RESIDUALS:],
                   int(cores) if _finite(cores, 0, 1e6) else 0, _held(data.get("held"))[-MAX_HELD:])


def save_samples(path: str, key: dict[str, object], samples: Samples) -> None:
    """Write atomically; an ``OSError`` is the caller's to report (or ignore)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = {"version": VERSION, "key": key, "turns": samples.turns,
            "prefill": [list(s) for s in samples.prefill], "decode": [list(s) for s in samples.decode],
            "overhead": [[x, o] for x, o in zip(samples.overhead, samples.overhead_load)],
            "residuals": [list(r) for r in samples.residuals], "n_cores": samples.n_cores,
            "held": [list(h) for h in samples.held]}
    write_json_atomically(path, data, ".calib-")


def write_json_atomically(path: str, data: object, prefix: str) -> None:
    """``data`` as JSON at ``path`` through a temporary file beside it and a rename, so a
    reader never sees half a file; the temporary goes on any failure (raised)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=prefix, suffix=".json")
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
