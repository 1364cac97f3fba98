"""What ``kvtop load``'s sweep says while it runs and after each level: the progress inside
a level (runner/server/load_progress.py: requests done of how many, tokens, elapsed,
ETA, what the other processes take now), the busy-machine warning and the levels whose
rate is not explained (runner/commands/load_checks.py).

Headless, a progress line goes to stderr every ``--progress`` seconds (``HEADLESS_EVERY_S``
by default; ``--quiet`` silences it); the live view gets one every ``LIVE_EVERY_S`` in its
status line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvtop.runner.commands.common import Report
from kvtop.runner.commands.load_checks import busy_note, level_checks
from kvtop.runner.commands.load_rows import cpu_share

if TYPE_CHECKING:
    from kvtop.runner.server.load_driver import LoadDriver

HEADLESS_EVERY_S = 10.0
LIVE_EVERY_S = 0.5


class Ticker:
    """Says the level's progress through ``say`` at most every ``every_s`` seconds."""

    def __init__(self, driver: LoadDriver, say: Callable[[str], None], every_s: float):
        self.driver, self.say, self.every_s = driver, say, every_s
        self.level = ""
        self.last = time.monotonic()

    def start(self, level: str) -> None:
        self.level = level
        self.last = time.monotonic()

    def __call__(self) -> None:
        now = time.monotonic()
        progress = self.driver.progress
        if progress is None or now - self.last < self.every_s or not self.level:
            return
        self.last = now
        self.say(f"{self.level}: {progress.text(now)}{others_now(self.driver)}")


def others_now(driver: LoadDriver) -> str:
    watch = driver.watch
    share = cpu_share(watch.others_now()) if watch is not None else None
    if share is None:
        return ""
    return f"; others {share:.0%} of the CPU" + (" (busy: figures low)" if busy_note(share) else "")


def check_level(level_rows: list[Report], before: Sequence[Report], local: bool, name: str) -> list[str]:
    """Sets each row's ``busy`` and ``unexplained``; the notes under the table for them."""
    notes = []
    for row in level_rows:
        level_checks(row, before, local)
    mine = level_rows[-1]  # the level's own row: a fleet's "all", else the only one
    if mine.get("busy"):
        notes.append(f"{name}: {mine['busy']}")
    for row in level_rows:
        if row.get("unexplained"):
            where = f" ({row['server']})" if len(level_rows) > 1 and row["server"] != "all" else ""
            notes.append(f"{name}{where} is not explained by the roof and the load: {row['unexplained']}")
    return notes
