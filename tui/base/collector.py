"""Python's cyclic garbage collector, kept out of the way of decode.

A full collection in the UI process took 35 ms of CPU in the middle of a
1,024-token turn (measured here), and on a 2-core machine that is 35 ms taken
from llama.cpp's threads, which stall together at every barrier. So: the objects
that live as long as the app (the modules imported before it runs) are frozen
out of the collector, and automatic collection waits while a turn
runs; reference counting still frees almost everything at once, and the cycles
left are collected when the turn ends. A turn is bounded by the context size.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    gc.collect()
    gc.freeze()


class TurnCollector:
    """Pauses automatic collection between ``turn_started`` and ``turn_ended``."""

    def __init__(self) -> None:
        self.paused = False

    def turn_started(self) -> None:
        if not self.paused and gc.isenabled():
            gc.disable()
            self.paused = True

    def turn_ended(self) -> None:
        if self.paused:
            self.paused = False
            gc.enable()
            gc.collect(1)  # the young garbage of the turn; older generations as usual
