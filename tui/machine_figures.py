"""The app's figures of this machine: the ceilings and roofline the panes draw against,
the estimate pane's rows, and the memory sample, from the model's facts and the
hardware profile (runner.physics.machine computes; this only feeds the panes)."""

from __future__ import annotations

import os
import time

from runner.pacing import MEMORY_HOLD_S
from runner.system.memory import take_sample

from .panes.decode import DecodePane
from .panes.estimate import EstimatePane
from .panes.memory import MemoryPane


class MachineFigures:
    def _ceilings(self, depth: int) -> tuple[float | None, float | None]:
        """The decode pane's lines: each device's share where the model is split."""
        from runner.physics.machine import ceilings_here

        if self.facts is None or self.layout_kv is None or self.hw is None:
            return None, None
        return ceilings_here(self.facts, self.layout_kv, self.hw, self.settings, depth)

    def roofline_prefill_s(self):
        """``(tokens, depth) -> seconds`` at this machine's roofline, or None unknown."""
        from runner.physics.machine import prefill_seconds_here

        if self.facts is None or self.layout_kv is None or self.hw is None:
            return None
        facts, layout, hw, settings = self.facts, self.layout_kv, self.hw, self.settings
        return lambda n, depth: prefill_seconds_here(facts, layout, hw, settings, n, depth)

    def update_estimate(self, mt=None, others_cpu: float | None = None) -> None:
        from runner.physics.estimate_rows import estimate_rows

        if self.facts is None or self.layout_kv is None or self.hw is None:
            return
        L = self.session.loaded
        buffers = L.buffers if L is not None and self.session.engine.capabilities.llama_buffers else None  # a server's are in its log
        rows = estimate_rows(self.facts, self.layout_kv, self.hw, self.settings, buffers=buffers,
                             peak_rss=self.query_one(MemoryPane).peak_engine_rss, turn=mt,
                             turn_ran=bool(self.session.turns), others_cpu=others_cpu)
        self.query_one(EstimatePane).set_rows(rows)

    def sample_memory(self) -> None:
        """Once a second. While a turn runs the sample waits for the turn's next update,
        so the pane redraws in the same frame as the figures instead of in one more."""
        pid = self.session.engine.pid
        pane = self.query_one(MemoryPane)
        wait = self.session.turn_running and time.monotonic() - pane.drawn_at < MEMORY_HOLD_S
        pane.set_sample(take_sample(pid, os.getpid(), same_process=pid == os.getpid()), redraw=not wait)
        self.cpu_tick()
        self.query_one(DecodePane).note_waiting(time.monotonic(), max(3.0, 3 * self.refresh_s))
