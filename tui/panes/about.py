"""The line under the status bar: what a bug report about a slow first token needs and
a screenshot would otherwise leave out.

kvtop's and llama-cpp-python's versions (llama.cpp's build for a server), the CPU's
name and the GPUs', the figures the ceilings are computed from (the probe's or the
datasheet's bandwidth and FLOPS), the batch sizes, the sampler, the system load and
the time. Fitted to the width by priority, as the status bar is: the time and load
go first, the versions stay. Shown when the terminal has the rows for it (and always
in Ctrl+S's whole-dashboard SVG, tui/sharing/full_shot.py).
"""

from __future__ import annotations

import os
import time

from rich.cells import cell_len
from textual.content import Content

from kvtop.runner.sanitize import clean_line
from kvtop.runner.settings import sampler_text
from kvtop.tui.panes.base import PaneWidget

GAP = "  "


def dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def hardware_items(hw) -> list[tuple[str, str]]:
    """(label, value) of the machine: the CPU (name, probe figures) and each GPU."""
    from kvtop.runner.system.cpu_name import cpu_name

    if hw is None:
        return []
    items = []
    name = clean_line(getattr(hw, "cpu_name", "") or cpu_name() or "CPU", 40)
    bw = getattr(hw, "cpu_bandwidth_gbs", None) or (hw.bandwidth_gbs if not hw.gpus else None)
    fl = getattr(hw, "cpu_tflops", None) or (hw.tflops if not hw.gpus else None)
    figures = " ".join(x for x in (f"{bw:.1f} GB/s" if bw else "", f"{fl:.3g} TFLOPS" if fl else "") if x)
    items.append(("cpu", name + (f" {figures}" if figures else "")))
    for g in hw.gpus:
        items.append((f"gpu{g.index}", clean_line(g.name, 32)))
    if hw.gpus and hw.bandwidth_gbs:
        items.append(("ceilings from", f"{clean_line(hw.source, 32)} {hw.bandwidth_gbs:.0f} GB/s"))
    return items


ABOUT_REFRESH_S = 10.0


class AboutBar(PaneWidget):
    def __init__(self, settings, server: bool = False, clock=time.time, live: bool = True, **kw) -> None:
        """``clock``: the time shown; ``live``: False in a replay (and tests), where the
        load of this machine now says nothing about the recording."""
        super().__init__(**kw)
        self.settings = settings
        self.clock, self.live = clock, live
        self.server = server
        self.hw = None
        self.versions = [("kvtop", dist_version("kvtop-llm"))]
        if not server:
            self.versions.append(("llama-cpp-python", dist_version("llama-cpp-python")))

    def on_mount(self) -> None:
        self.set_interval(ABOUT_REFRESH_S, self.refresh)  # its load and clock move on by themselves

    def set_hardware(self, hw) -> None:
        self.hw = hw
        self.refresh()

    def items(self) -> list[tuple[str, str]]:
        """Every item, most important first."""
        s = self.settings
        out = list(self.versions) + hardware_items(self.hw)
        if not self.server:
            out.append(("batch", f"{s.n_batch}/{s.n_ubatch}"))
        out.append(("sampler", sampler_text(s)))
        if self.live:
            try:
                out.append(("load", f"{os.getloadavg()[0]:.2f}"))
            except OSError:
                pass
            out.append(("", time.strftime("%Y-%m-%d %H:%M", time.localtime(self.clock()))))
        return out

    def render(self) -> Content:
        width = self.size.width or 160
        items = self.items()
        while len(items) > 2 and cell_len(self._plain(items)) > width:
            items.pop()
        parts: list = [" "]
        for i, (label, value) in enumerate(items):
            if i:
                parts.append(GAP)
            if label:
                parts.append((f"{label} ", "$text-muted"))
            parts.append(value)
        return Content.assemble(*parts)

    @staticmethod
    def _plain(items) -> str:
        return " " + GAP.join(f"{label} {value}" if label else value for label, value in items)
