"""The whole dashboard as an SVG at a readable size, whatever the terminal's size.

A screenshot is what a user attaches to a bug report about a slow first token, and
at 80x24 the panes are split into pages (tui/dashboard.py): the visible screen shows
one of them. Ctrl+S therefore also saves the dashboard laid out for SHOT_COLUMNS
columns and as many rows as its panes need (at least SHOT_ROWS), every pane on it.

How: inside ``batch_update`` (nothing reaches the terminal) the screen is laid out
again at that size, the chart redrawn for it, the compositor's full frame exported
as Textual's own screenshot does, and the layout put back (Textual's private calls
this needs are in tui/base/textual_private.py). The panes render from the
same state as on screen, so the figures are the same ones; only the sizes differ.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Console
from textual.geometry import Size

from kvtop.tui.base.textual_private import forget_arrangement, reflow_now, refresh_layout, whole_frame

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp

SHOT_COLUMNS = 160
SHOT_ROWS = 48


def whole_dashboard_size(app: KvtopApp) -> Size:
    """160 columns, and the rows that put every pane on one page (at least 48)."""
    from kvtop.tui.dashboard import WIDE_COLUMNS

    units = app.dash.units(int(SHOT_COLUMNS * 0.62), SHOT_COLUMNS >= WIDE_COLUMNS, planning_here=False)
    rows = sum(u.height for u in units) + 3  # the status, about and key bars
    return Size(SHOT_COLUMNS, max(SHOT_ROWS, rows))


def needs_whole_dashboard(app: KvtopApp) -> bool:
    """The visible screen leaves something out: panes on other pages, or a terminal
    narrower or shorter than the readable size."""
    pager = app.query_one("#pager")
    return pager.display or app.size.width < SHOT_COLUMNS or app.size.height < SHOT_ROWS


def _forget_sizes(app: KvtopApp) -> None:
    """What a widget drew (a bar as wide as its pane), the heights measured from it and
    each container's arrangement belong to the old size (Textual clears them on its
    next idle, too late for a layout done now): drop them."""
    for widget in app.screen.walk_children(with_self=True):
        widget.refresh(layout=True)
        forget_arrangement(widget)


def _reflow(screen, size: Size) -> None:
    """Lay the screen out at ``size`` now, and tell each widget its new size, without the
    Resize events Textual's own layout posts: handled after the shot, those would lay
    the screen out at the shot's size again (and again, back and forth)."""
    reflow_now(screen, size)


def _relayout(app: KvtopApp, size: Size) -> None:
    from kvtop.tui.panes.decode import DecodePane

    app.dash.fit(size.width, size.height)
    _forget_sizes(app)
    _reflow(app.screen, size)
    for pane in app.query(DecodePane):  # the chart is planned for its width when drawn
        pane._draw_chart()
    _forget_sizes(app)  # the panes drawn at their new widths: their heights again
    _reflow(app.screen, size)


def whole_dashboard_svg(app: KvtopApp, title: str = "kvtop") -> str:
    """The SVG of every pane at a readable size; the screen is left as it was."""
    real = app.size
    page = app.dash.page
    size = whole_dashboard_size(app)
    with app.batch_update():
        try:
            _relayout(app, size)
            console = Console(width=size.width, height=size.height, file=io.StringIO(), force_terminal=True,
                              color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
            console.print(whole_frame(app))
            svg = console.export_svg(title=title)
        finally:
            app.dash.page = page
            app.dash._plan_key = None
            _relayout(app, real)
    app.call_after_refresh(_settle, app)
    return svg


def _settle(app: KvtopApp) -> None:
    """Once the messages posted during the shot are handled: lay the screen out afresh."""
    _forget_sizes(app)
    refresh_layout(app.screen)
    app.screen.refresh(layout=True)
