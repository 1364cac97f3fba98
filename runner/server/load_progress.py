"""Where a level of ``kvtop load`` stands while it runs: requests done of how many, the
tokens streamed so far, the time it has taken and how long it has left.

The driver (runner/server/load_driver.py) counts into a ``LevelProgress`` from its
threads (under its lock); the sweep reads it from the main thread every few tenths of a
second and says it (stderr headless, the live view's status line). A trial's 19 minutes
headless showed only "level 2/3: 2 users" lines.

The ETA comes from the tokens streamed, not the requests done: every request asks for
``-n`` tokens, so a level of 4 requests of 900 tokens says how far it is before the
first one ends. With ``--duration`` it is the time left of the level (the requests in
flight then still end).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def fmt_span(s: float) -> str:
    """``41 s``, ``3 min 05 s``, ``1 h 02 min``: a progress line's times."""
    s = max(0, round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class LevelProgress:
    """One level's counts; ``total`` requests (None: as many as ``duration`` brings)."""

    total: int | None
    n_predict: int
    duration: float | None = None
    t0: float = field(default_factory=time.monotonic)
    done: int = 0  # requests that ended, whatever their outcome
    tokens: int = 0  # generated tokens streamed, by every request, finished or not

    def elapsed(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.t0

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left, or None while nothing says."""
        elapsed = self.elapsed(now)
        if self.duration is not None:
            return max(self.duration - elapsed, 0.0)
        if not self.total:
            return None
        want = self.total * self.n_predict
        if self.tokens <= 0 or want <= 0:
            return None
        frac = min(self.tokens / want, 1.0)
        return elapsed * (1.0 - frac) / frac

    def text(self, now: float | None = None) -> str:
        """``3/8 requests done, 412/1,024 tokens, 41 s, ETA 1 min 02 s``."""
        total = f"/{self.total:,}" if self.total else ""
        parts = [f"{self.done:,}{total} requests done"]
        if self.total:
            parts.append(f"{self.tokens:,}/{self.total * self.n_predict:,} tokens")
        else:
            parts.append(f"{self.tokens:,} tokens")
        parts.append(fmt_span(self.elapsed(now)))
        eta = self.eta(now)
        if eta is not None:
            parts.append(("ETA " if self.duration is None else "--duration ends in ") + fmt_span(eta))
        return ", ".join(parts)
