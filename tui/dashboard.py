"""Which panes the dashboard shows at this terminal size, and how tall each is.

The plan depends on the terminal's size, never on what a turn wrote: the Prefill and
Estimate panes have a fixed number of rows (``SLOTS``) and fold what does not fit
(their last line ends in "…"); KV and Memory are planned at least at ``FLOORS`` rows
(their lines are the model's and the machine's, not a turn's), the decode pane at
its least (``DECODE_PLAN``), and the decode chart takes the rows left over. Planned
from what the panes happened to show, 160x48 was one page before a turn and two
after it (the TTFT lines and the verdict pushed Estimate and Memory off), and back
to one at the next prefill. When the panes do not all fit they are split into
pages, in their order, each page filled as far as it goes; a one-line pager above
the panes names the pages (F6 or a click turns them): at 80x24 "Prefill KV",
"Decode", "Estimate" and "Memory"; at 120x40 "Prefill KV Decode" and "Estimate
Memory"; at 160x48 one page.

From WIDE_COLUMNS on, the panes sit two to a row (prefill beside KV, estimate beside
memory; server, fleet and decode span both columns) and the grid's rows are set
from the taller pane of each row, so no row is padded and none is cut.

The planning (``plan_pages``, ``row_heights``) is pure; ``Dashboard`` holds the
widgets' typed references, measures the panes and applies the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from textual import events
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widget import Widget

from kvtop.tui.base.prompt_input import PromptInput
from kvtop.tui.panes.about import AboutBar
from kvtop.tui.panes.base import PaneWidget
from kvtop.tui.panes.chat import ChatLog, StreamTail
from kvtop.tui.panes.decode import DecodePane
from kvtop.tui.panes.estimate import EstimatePane
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.memory import MemoryPane
from kvtop.tui.panes.prefill import PrefillPane
from kvtop.tui.panes.status import StatusBar

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.panes.fleet import FleetPane
    from kvtop.tui.panes.server import ServerPane

WIDE_COLUMNS = 140
ABOUT_MIN_ROWS = 30  # below this the versions/hardware line gives its row to the panes
DECODE_CHART_MIN = 9  # rows of chart (title, frame and x labels take 4) below which it is not worth showing:
# at 6, --server at 120x40 gave the plot 2 rows, the measured line lay on the 0 row
# the decode pane's least rows for the plan: its summary (3), two lines of legend (a third, in a
# narrow pane, comes out of the chart), the chart and the border; the lines of the moment never move a page
DECODE_PLAN = 3 + 2 + DECODE_CHART_MIN + 2
# content lines of the panes whose text grows with a turn: they get exactly these and fold the rest
SLOTS = {"prefill": 6, "estimate": 19}
# the least content lines the plan gives the others (more only where their own lines need it)
FLOORS = {"kv": 5, "memory": 10}
TITLES = {"prefill": "Prefill", "kv": "KV", "server": "Server", "fleet": "Fleet", "decode": "Decode",
          "estimate": "Estimate", "memory": "Memory"}
NARROW_UNITS = (("prefill",), ("kv",), ("server",), ("fleet",), ("decode",), ("estimate",), ("memory",))
WIDE_UNITS = (("prefill", "kv"), ("server",), ("fleet",), ("decode",), ("estimate", "memory"))
SHORT = {"prefill": "PP", "kv": "KV", "server": "Srv", "fleet": "Fleet", "decode": "TG", "estimate": "Est",
         "memory": "Mem"}  # the pager's labels when the full names do not fit
FLEXIBLE = "decode"  # the pane that takes the rows left over


@dataclass(frozen=True)
class Unit:
    """One row of the dashboard: its panes (two side by side in the wide grid) and the
    rows it needs (for the decode pane: the least it can do with)."""

    panes: tuple[str, ...]
    height: int
    grows: bool = True  # kvtop load: the decode pane has no chart (no chat turn), so it takes no spare rows

    @property
    def flexible(self) -> bool:
        return FLEXIBLE in self.panes and self.grows


def plan_pages(units: list[Unit], rows: int) -> list[list[Unit]]:
    """The units split into pages of at most ``rows`` rows, in order, each page filled
    as far as it goes; one page when everything fits. A page that needs one is given a
    pager row, so pages are planned for ``rows - 1``. A unit taller than a page gets
    a page of its own (it scrolls)."""
    if sum(u.height for u in units) <= rows:
        return [list(units)] if units else []
    room = max(1, rows - 1)
    pages: list[list[Unit]] = [[]]
    used = 0
    for u in units:
        if pages[-1] and used + u.height > room:
            pages.append([])
            used = 0
        pages[-1].append(u)
        used += u.height
    return pages


def row_heights(page: list[Unit], rows: int) -> list[int]:
    """Each unit's rows on its page: its own height, and the flexible one (decode) all
    that the others leave."""
    fixed = sum(u.height for u in page if not u.flexible)
    return [max(u.height, rows - fixed) if u.flexible else u.height for u in page]


def page_label(page: list[Unit], names: dict[str, str] = TITLES) -> str:
    return " ".join(names[p] for u in page for p in u.panes)


def pager_labels(pages: list[list[Unit]], width: int) -> list[str]:
    """The pages' names, shortened ("PP KV", "TG", "Est") when the full ones would not
    fit on the pager's line."""
    full = [page_label(p) for p in pages]
    if 3 + sum(cell_len(f" {i + 1} {label} ") for i, label in enumerate(full)) <= width:
        return full
    return [page_label(p, SHORT) for p in pages]


class PagerBar(PaneWidget):
    """One line above the panes when they take more than one page: ``F6 page: [1 Prefill
    KV] 2 Decode 3 Estimate``; a click on a page's name shows it."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.labels: list[str] = []
        self.current = 0
        self._spans: list[tuple[int, int, int]] = []

    def show(self, labels: list[str], current: int) -> None:
        if (labels, current) != (self.labels, self.current):
            self.labels, self.current = labels, current
            self.refresh()

    def render(self) -> Content:
        parts: list = [("F6", "bold $accent"), " "]
        x = 3
        spans = []
        for i, label in enumerate(self.labels):
            text = f" {i + 1} {label} "
            spans.append((x, x + cell_len(text), i))
            parts.append((text, "reverse bold $primary" if i == self.current else "$text-muted"))
            x += cell_len(text)
        self._spans = spans
        return Content.assemble(*parts)

    def on_click(self, event: events.Click) -> None:
        for start, end, index in self._spans:
            if start <= event.x < end:
                self.app.dash.show_page(index)
                return


class MetricsScroll(VerticalScroll):
    """The panes' container. A click on a pane focuses it (its border lights up) and
    scrolls all of it into view; with a pane focused, the arrows, PageUp/PageDown,
    Home and End scroll the panes (this container's bindings), and typing goes back to
    the prompt (tui/panes/chat.py TypedKeys)."""

    def on_click(self, event: events.Click) -> None:
        node = event.widget
        while node is not None and node.parent is not self:
            node = node.parent
        if node is not None and node.id in TITLES:
            node.focus()
            node.scroll_visible(animate=False)


class Dashboard:
    """The dashboard's widgets by name and type, and the plan of its pages.

    Why an object of its own: every handler used to find its pane with a query of the
    whole DOM (``query_one``, 113 calls in tui/), and the layout was a mixin whose state
    lived on the App. The panes are composed once with the app and stay for its whole
    life, so their references are taken once (``bind``, when the app mounts) and kept
    here, typed: a handler writes ``app.dash.prefill.progress(...)``. The page plan
    (which panes show, each unit's rows) is this object's own state.
    """

    status: StatusBar
    about: AboutBar
    chat: ChatLog
    tail: StreamTail
    prompt: PromptInput
    pager: PagerBar
    column: Widget  # the metrics column: its width is the panes' width
    metrics: MetricsScroll
    prefill: PrefillPane
    kv: KVPane
    decode: DecodePane
    estimate: EstimatePane
    memory: MemoryPane
    server: ServerPane | None  # kvtop --server only
    fleet: FleetPane | None  # kvtop --server with several servers only

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.page = 0  # the page shown when there are several
        self._plan_key = None
        self._fit_pending = False
        self._panes: dict | None = None
        self._applied: dict = {}
        self.bound = False

    def bind(self) -> None:
        """Take the composed widgets' references, once (the app has composed them)."""
        if self.bound:
            return
        q = self.app.query_one
        self.status, self.about, self.chat, self.tail = q(StatusBar), q(AboutBar), q(ChatLog), q(StreamTail)
        self.prompt, self.pager, self.metrics = q("#prompt", PromptInput), q(PagerBar), q(MetricsScroll)
        self.column = q("#metrics-column")
        self.prefill, self.kv, self.decode = q(PrefillPane), q(KVPane), q(DecodePane)
        self.estimate, self.memory = q(EstimatePane), q(MemoryPane)
        self.server = next(iter(self.app.query("#server")), None)
        self.fleet = next(iter(self.app.query("#fleet")), None)
        self.bound = True

    def request_fit(self) -> None:
        """A pane's lines changed: plan again once the screen has laid it out."""
        if not self._fit_pending:
            self._fit_pending = True
            self.app.call_after_refresh(self._fit_requested)

    def _fit_requested(self) -> None:
        self._fit_pending = False
        self.fit()

    def panes(self) -> dict[str, object]:
        """The panes by name, found once: they are composed with the app and stay (a
        query of the whole DOM per pane cost ~3 ms on every plan)."""
        if self._panes is not None:
            return self._panes
        found = {}
        for name in TITLES:
            hits = self.app.query(f"#{name}")
            if hits:
                found[name] = hits.first()
        if FLEXIBLE in found:  # composed: keep them
            self._panes = found
        return found

    @property
    def chartless(self) -> bool:
        """kvtop load: no chat turn, so no decode chart (it was half the screen, empty);
        its ceilings stay, and its rows go to the panes with data."""
        return self.app.options.load is not None

    def _pane_height(self, name: str, pane, width: int) -> int:
        """Rows the plan gives the pane at a content ``width``, borders included: fixed
        for the panes whose lines a turn changes (the plan must not move between turns);
        kvtop load's decode pane has its summary only."""
        if name == FLEXIBLE and self.chartless:
            from kvtop.tui.panes.decode import DecodeSummary

            summaries = pane.query(DecodeSummary)
            return max(3, summaries.first().height_at(width) if summaries else 3) + 2
        if name == FLEXIBLE:
            return DECODE_PLAN
        if name in SLOTS:
            return SLOTS[name] + 2
        lines = pane.height_at(width) if isinstance(pane, PaneWidget) else -1
        return max(FLOORS.get(name, 1), lines) + 2

    def units(self, width: int, wide: bool, planning_here: bool = True) -> list[Unit]:
        """The dashboard's rows at a metrics column ``width``: a pane on screen is measured
        at its own width (``planning_here``), a hidden one at the width it would get."""
        panes = self.panes()
        units = []
        for names in WIDE_UNITS if wide else NARROW_UNITS:
            names = tuple(n for n in names if n in panes)
            if not names:
                continue
            cell = width // len(names) if wide else width
            heights = []
            for n in names:
                shown = panes[n].content_region.width if planning_here else 0
                content = shown if shown > 0 else max(1, cell - 4)  # border and padding
                heights.append(self._pane_height(n, panes[n], content))
            units.append(Unit(names, max(heights), grows=not self.chartless))
        return units

    def fit(self, width: int | None = None, height: int | None = None) -> None:
        """Plan the pages for the terminal's size (or the one given: a screenshot of the
        whole dashboard) and apply the plan: which panes show, each unit's rows."""
        app = self.app
        self.bind()
        width = app.size.width if width is None else width
        height = app.size.height if height is None else height
        wide = width >= WIDE_COLUMNS
        here = width == app.size.width and wide == app.has_class("-wide")  # the panes' widths are current
        if wide != app.has_class("-wide"):
            app.set_class(wide, "-wide")
        metrics_width = self.column.size.width or int(width * (0.62 if wide else 0.55))
        if width != app.size.width:  # planning for another size: the column scales with it
            metrics_width = int(width * (0.62 if wide else 0.55))
        about = self.about
        if about.display != (height >= ABOUT_MIN_ROWS):  # set only on a change: each set re-lays out the screen
            about.display = height >= ABOUT_MIN_ROWS
        rows = max(4, height - 2 - (1 if about.display else 0))  # the status, about and key bars
        units = self.units(metrics_width, wide, here)
        pages = plan_pages(units, rows)
        self.page = min(self.page, max(0, len(pages) - 1))
        key = (wide, rows, metrics_width, tuple(tuple(u for u in p) for p in pages), self.page)
        if key == self._plan_key:
            return
        self._plan_key = key
        self.apply_page(pages, rows, wide)
        if not here and width == app.size.width:  # the layout just changed: measure it again
            app.call_after_refresh(self.fit)

    def apply_page(self, pages: list[list[Unit]], rows: int, wide: bool) -> None:
        panes = self.panes()
        several = len(pages) > 1
        pager = self.pager
        self._apply(pager, "display", several)
        pager.show(pager_labels(pages, self.column.size.width), self.page)
        page = pages[self.page] if pages else []
        shown = {n for u in page for n in u.panes}
        heights = row_heights(page, rows - (1 if several else 0))
        if wide:
            self._apply(self.metrics.styles, "grid_rows", " ".join(str(h) for h in heights) or "1fr")
        planned = {n: h for u, h in zip(page, heights) for n in u.panes}
        for name, pane in panes.items():
            pane.can_focus = True  # a click or Tab focuses a pane; its container scrolls it
            self._apply(pane, "display", name in shown)
            fixed = name == FLEXIBLE or name in SLOTS  # the decode pane's rows, a slotted pane's
            height = "100%" if wide else planned.get(name, 0) if fixed else "auto"
            self._apply(pane.styles, "height", height)

    def _apply(self, target, attr: str, value) -> None:
        """Set a style only when it changes: each set re-lays out the screen, and a
        re-layout every second left a chat reply at a stale height now and then."""
        key = (id(target), attr)
        if self._applied.get(key) != value:
            self._applied[key] = value
            setattr(target, attr, value)

    def show_page(self, index: int) -> None:
        self.page = index
        self._plan_key = None
        self.fit()

    def next_page(self) -> None:
        """F6: the next page of panes (when they take more than one)."""
        count = max(1, len(self.pager.labels))
        if count == 1:
            self.app.notify("every pane fits on the screen: there is one page", markup=False, timeout=3)
            return
        self.show_page((self.page + 1) % count)
