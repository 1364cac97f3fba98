"""Widgets whose lines never hold links.

Textual re-styles every segment of every line a widget renders, looking for
``@click`` links (``auto_links``). kvtop's panes draw only text kvtop writes
itself, as ``Content`` without actions, so that pass finds nothing; measured
during decode it was about a quarter of the UI's time in Python, and every
millisecond the UI spends is taken from llama.cpp's threads on a small machine.
"""

from __future__ import annotations

from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Static
from textual_plotext import PlotextPlot


class LinklessWidget(Widget):
    auto_links = Reactive(False)

    def wrapped_height(self) -> int:
        """Lines the pane's content takes at its width: a pane re-lays out the screen
        (costly, it reflows every pane) only when this changes."""
        width = self.content_region.width
        if width <= 0:
            return -1
        return len(self.render().wrap(width))


class LinklessStatic(Static):
    auto_links = Reactive(False)


class LinklessPlot(PlotextPlot):
    auto_links = Reactive(False)
