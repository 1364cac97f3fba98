"""Memory: engine and UI RSS, system RAM and swap, GPUs (NVML), llama.cpp's buffers.

No NVML is a value: the pane says "no NVIDIA GPU" and the rest still shows.
"""

from __future__ import annotations

import time

from textual.content import Content

from kvtop.runner.physics.verdicts import BUSY_SHARE
from kvtop.runner.sanitize import clean_line

# the probe lives in runner.system.memory; re-exported while tui/app.py imports it from here
from kvtop.runner.system.memory import MemorySample
from kvtop.runner.units import MIB
from kvtop.tui.base.format import NA, bar, fmt_bytes, pack
from kvtop.tui.panes.base import PaneWidget


class MemoryPane(PaneWidget):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.border_title = "Memory"
        self.sample: MemorySample | None = None
        self.buffers = None  # runner.llama_buffers.LlamaBuffers
        self.peak_engine_rss: int | None = None  # the chat's: the Estimate pane's "peak mem" row is this figure
        self.measuring: str | None = None  # "F7" / "F8" while a measurement runs in contexts of its own
        self.peak_measuring: tuple[int, str] | None = None  # (the engine's peak then, which) when over the chat's
        self.stale = False  # holds a sample not drawn yet
        self.drawn_at = 0.0
        self.not_sampled: str | None = None  # why there are no live samples (a replay)
        self.cpu = None  # runner.system.cpu_use.CPUUse over the last second

    def set_not_sampled(self, note: str) -> None:
        """No live figures on purpose (a replay shows only what was recorded): say so."""
        self.not_sampled = note
        self.refresh(layout=True)

    def set_sample(self, s: MemorySample, redraw: bool = True) -> None:
        """Keep the sample (and the peak); ``redraw=False`` leaves the drawing to
        ``redraw_if_stale``, so it can share a frame with other panes."""
        relayout = self.sample is None or len(self.sample.gpus) != len(s.gpus)
        self.sample = s
        if s.engine_rss is not None and self.measuring:  # F7's or F8's own contexts: not the chat's peak
            if s.engine_rss > (self.peak_measuring or (0, ""))[0]:
                self.peak_measuring = (s.engine_rss, self.measuring)
        elif s.engine_rss is not None:
            self.peak_engine_rss = max(self.peak_engine_rss or 0, s.engine_rss)
        if redraw or relayout:
            self._redraw(relayout)
        else:
            self.stale = True

    def redraw_if_stale(self) -> None:
        if self.stale:
            self._redraw(False)

    def _redraw(self, relayout: bool) -> None:
        self.stale = False
        self.drawn_at = time.monotonic()
        self.refresh(layout=relayout)

    def _rss(self, rss: int | None) -> list[Content]:
        """The engine's RSS and the chat's peak (the Estimate pane's row), and the peak a
        measurement reached in contexts of its own when over it: after F7 the pane read
        "peak 865 MiB" beside the Estimate pane's 281 MiB (new-user trial)."""
        out = [Content.assemble(("engine RSS ", "$text-muted"), fmt_bytes(rss)),
               Content.assemble(("peak ", "$text-muted"), fmt_bytes(self.peak_engine_rss))]
        over = self.peak_measuring
        if over is not None and over[0] > (self.peak_engine_rss or 0):
            out.append(Content.styled(f"({fmt_bytes(over[0])} while {over[1]} measured)", "$text-muted"))
        return out

    def set_cpu(self, use) -> None:
        """Cores used by the engine, the UI and everything else; drawn with the next sample."""
        self.cpu = use

    def _cpu_line(self) -> list[Content] | None:
        """The CPU's phrases (engine, UI, the others): at 80x24 one line wrapped "cores" alone."""
        u = self.cpu
        if u is None:
            return None

        def cores(x):
            return NA if x is None else f"{x:.1f}"

        busy = u.others_share is not None and u.others_share >= BUSY_SHARE
        return [Content.assemble(("CPU ", "$text-muted"), "engine ", cores(u.engine)),
                Content.assemble(("UI ", "$text-muted"), cores(u.ui)),
                Content.assemble(("others ", "$text-muted"), (cores(u.others), "$kvtop-warn" if busy else ""),
                                 (f" of {u.cores} cores", "$text-muted"))]

    def set_buffers(self, buffers) -> None:
        self.buffers = buffers
        self.refresh(layout=True)

    def render(self) -> Content:
        s = self.sample
        w = max(0, self.size.width - 2)
        lines: list[Content] = []
        if s is None:
            lines.append(Content.styled(self.not_sampled or "sampling…", "$text-muted"))
        else:
            lines += pack(self._rss(s.engine_rss), self.content_region.width)
            lines.append(Content.assemble(("UI RSS ", "$text-muted"),
                                          fmt_bytes(s.ui_rss) if s.ui_rss else "same process as the engine"))
            sm = s.system
            if sm.total:
                lines.append(bar(w, [(sm.used / sm.total, "$kvtop-measured")]))
            lines.append(Content.assemble(("RAM ", "$text-muted"), fmt_bytes(sm.used), " / ", fmt_bytes(sm.total),
                                          ("  free ", "$text-muted"), fmt_bytes(sm.available)))
            lines.append(Content.assemble(("swap ", "$text-muted"), fmt_bytes(sm.swap_used), " / ",
                                          fmt_bytes(sm.swap_total)))
            if (cpu := self._cpu_line()) is not None:
                lines += pack(cpu, self.size.width)
            if not s.gpus:
                # "no NVIDIA GPU" and its reason, broken between them where the pane is narrow
                note = clean_line(s.gpu_note or "no NVIDIA GPU")
                head, sep, why = note.partition(" (")
                lines += pack([Content.styled(p, "$text-muted") for p in ([head, "(" + why] if sep else [note])],
                              self.size.width, gap=" ")
            for g in s.gpus:
                used = fmt_bytes(g.memory_used)
                util = f"{g.utilization}%" if g.utilization is not None else NA
                lines += pack([Content.assemble((f"GPU{g.index} ", "bold"), clean_line(g.name, 28)),
                               f"{used} / {fmt_bytes(g.memory_total)}",
                               Content.assemble(("engine ", "$text-muted"), fmt_bytes(g.process_memory)),
                               Content.assemble(("util ", "$text-muted"), util)], self.size.width)
        b = self.buffers
        if b is not None:
            # mapped weights are paged in from the file as they are read: the engine's RSS
            # counts only the pages touched so far (--no-mmap reads them all in at load)
            how = {True: " (mmap)", False: " (read in)"}.get(b.weights_mapped, "")
            lines += pack([Content.assemble(("llama.cpp ", "$text-muted"), "weights ",
                                            fmt_bytes(b.weights_mib * MIB), (how, "$text-muted")),
                           f"KV {fmt_bytes(b.kv_mib * MIB)}", f"compute {fmt_bytes(b.compute_total_mib * MIB)}"],
                          self.size.width)
        return Content("\n").join(lines)
