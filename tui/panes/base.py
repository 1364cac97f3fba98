"""What kvtop's panes share: they are cheap to redraw.

Every millisecond the UI spends during decode is taken from llama.cpp's threads
on a small machine, so:

* no link pass: Textual re-styles every segment of every line a widget renders,
  looking for ``@click`` links (``auto_links``). The panes draw only text kvtop
  writes itself, as ``Content`` without actions, so that pass finds nothing;
  measured during decode it was about a quarter of the UI's time in Python;
* re-layout only when the height changes (``wrapped_height``): a re-layout
  reflows every pane on the screen. Word-wrapping a pane to learn its height costs
  more than drawing it, so lines that fit are counted, not wrapped.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.content import Content
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Static
from textual_plotext import PlotextPlot

from kvtop.tui.base.flow import flow


def lines_at(content, width: int) -> int:
    """Lines ``content`` (a textual Content) takes at ``width`` cells, wrapped as Textual
    draws it (-1 for no width: a pane on another page, or not laid out yet, has none);
    lines that went through ``fold`` all fit, so they are counted as they are."""
    if width <= 0:
        return -1
    lines = content.plain.split("\n")
    if all(cell_len(line) <= width for line in lines):
        return len(lines)
    return len(content.wrap(width))


def fold(lines: list, width: int, height: int) -> list:
    """``lines`` (Content) kept to ``height`` lines at ``width`` cells: the dashboard gives
    a pane a fixed number of rows (tui/dashboard.py SLOTS), so its page plan never
    changes with what the pane happens to say. Lines are kept in order (a pane lists
    what matters most first); when they do not all fit, the last line kept ends in
    "…". No width or height yet (a pane not laid out): everything."""
    if width <= 0:
        return lines
    out: list = []
    for line in lines:  # broken between phrases here, never by Textual's wrap (tui/base/flow.py)
        out += flow(line, width) if cell_len(line.plain) > width else [line]
    if height <= 0 or len(out) <= height:
        return out
    out = out[:height]
    last = out[-1]
    if last.cell_length >= width:
        last = last[: max(0, width - 1)]
    out[-1] = Content.assemble(last.rstrip(), ("…", "$text-muted"))
    return out


class PaneWidget(Widget):
    auto_links = Reactive(False)

    def refresh(self, *regions, layout: bool = False, **kw):
        """A re-layout (the pane's height may have changed) also re-plans the dashboard's
        rows and pages (tui/dashboard.py), once after the screen has redrawn."""
        if layout and self.is_mounted:
            dash = getattr(self.app, "dash", None)  # the kvtop app's (tui/dashboard.py)
            if dash is not None:
                dash.request_fit()
        return super().refresh(*regions, layout=layout, **kw)

    def wrapped_height(self) -> int:
        """Lines the pane's content takes at its width (-1 before it has one)."""
        return self.height_at(self.content_region.width)

    def height_at(self, width: int) -> int:
        """Lines the content would take at ``width`` cells (-1 for no width): the
        dashboard plans a hidden pane's height at the width it would have."""
        return lines_at(self.render(), width) if width > 0 else -1


class PaneStatic(Static):
    auto_links = Reactive(False)


class PanePlot(PlotextPlot):
    auto_links = Reactive(False)
