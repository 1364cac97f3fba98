"""The key bar at the bottom: the keys that matter, fitted to the terminal's width.

Textual's footer lists bindings in the order it finds them and cuts the line where
the terminal ends: at 80 columns it showed Ctrl+E first and no F1. Here the keys are
ranked; as the width shrinks the least important labels shorten first, then the
least important keys go, so Esc, F1 and Ctrl+Q stay at any width. A click on a key
runs it.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.content import Content

from kvtop.tui.panes.base import PaneWidget

# (key, label, short label, action), most important first
KEYS = (
    ("Esc", "cancel", "cancel", "cancel_turn"),
    ("F1", "help", "help", "help"),
    ("^Q", "quit", "quit", "quit"),
    ("F2", "TTFT waterfall", "TTFT", "waterfall"),
    ("^S", "screenshot", "shot", "screenshot"),
    ("^P", "palette", "palette", "command_palette"),
    ("^L", "new chat", "new", "new_chat"),
    ("^E", "export", "export", "export"),
    ("^O", "attach file", "attach", "attach_file"),
    ("^R", "restart engine", "restart", "restart_engine"),
    ("^T", "theme", "theme", "change_theme"),
    ("F3", "markdown", "md", "toggle_markdown"),
)
NEXT_SERVER = ("F4", "next server", "next", "next_server")
LOAD_KEYS = (  # kvtop load's live view (tui/server/load_view.py): no chat, so none of its keys
    ("Esc", "stop the load", "stop", "stop_load"),
    ("q", "stop (q again quits)", "stop", "quit_when_stopped"),
    ("^C", "stop, then quit", "stop+quit", "quit"),
    ("F1", "help", "help", "help"),
    ("^S", "screenshot", "shot", "screenshot"),
    ("^T", "theme", "theme", "change_theme"),
)
LOAD_STOPPED_KEYS = (  # once the sweep has ended or stopped: nothing left to stop
    ("q", "quit and print the table", "quit", "quit_when_stopped"),
) + LOAD_KEYS[3:]
GAP = 2


def fit_keys(keys, width: int) -> list[tuple[str, str, str]]:
    """(key, label, action) for the keys shown in ``width`` cells: full labels while they
    fit, then short ones from the least important up, then the least important dropped."""
    labels = [k[1] for k in keys]

    def size(n: int) -> int:
        return 1 + sum(cell_len(keys[i][0]) + 1 + cell_len(labels[i]) for i in range(n)) + GAP * max(0, n - 1)

    n = len(keys)
    for i in reversed(range(n)):
        if size(n) <= width:
            break
        labels[i] = keys[i][2]
    while n > 1 and size(n) > width:
        n -= 1
    return [(keys[i][0], labels[i], keys[i][3]) for i in range(n)]


class KeyBar(PaneWidget):
    def __init__(self, several_servers: bool = False, load: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.keys = KEYS[:3] + (NEXT_SERVER,) + KEYS[3:] if several_servers else KEYS
        if load:
            self.keys = LOAD_KEYS + ((NEXT_SERVER,) if several_servers else ())
        self._spans: list[tuple[int, int, str]] = []  # (first cell, end, action) as last drawn

    def load_ended(self) -> None:
        """The load stopped or finished: Esc and Ctrl+C have nothing left to stop."""
        self.keys = LOAD_STOPPED_KEYS + tuple(k for k in self.keys if k == NEXT_SERVER)
        self.refresh()

    def render(self) -> Content:
        parts: list = [" "]
        spans = []
        x = 1
        for key, label, action in fit_keys(self.keys, self.size.width or 80):
            if len(parts) > 1:
                parts.append(" " * GAP)
                x += GAP
            width = cell_len(key) + 1 + cell_len(label)
            spans.append((x, x + width, action))
            parts += [(key, "bold $accent"), " ", (label, "$foreground")]
            x += width
        self._spans = spans
        return Content.assemble(*parts)

    def on_resize(self) -> None:
        self.refresh()

    async def on_click(self, event: events.Click) -> None:
        for start, end, action in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action)
                return
