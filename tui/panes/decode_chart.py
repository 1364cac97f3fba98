"""The decode pane's chart: tok/s per KV position (plotext), and its legend.

What the chart promises, and why:

* **whole numbers on both axes**: x ticks sit on KV positions and y ticks on round
  rates, labelled with ``fmt_int`` (plotext's own ticks read "41.0 42.2 43.5");
  rates under 5 tok/s get one decimal, as a 2-tok/s axis needs;
* **the legend is a line under the plot** (``ChartLegend``), never inside it, where
  plotext draws it over the lines when the pane is narrow;
* **the y axis fits the measured series**: linear from 0 to just above it. The
  bandwidth ceiling is drawn as a line when it is within ``CEILING_SPAN`` times the
  measured top (the series then keeps a third of the height or more); further up,
  the legend states it and by how much it is above the scale. Scaled to a far
  ceiling, a 12 tok/s series lay on the bottom row. A log axis would keep both lines
  on screen, but it flattens what the chart is for (decode slowing by a few tens of
  percent as the context grows is a sliver of a decade) and plotext labels it in
  powers of ten;
* **a stall is a break, not a drop to 0**: the series has no point across a pause
  (``tui/base/decode_series.py``), each run between stalls is its own line, and the
  stall's position is marked with a vertical line in the warning colour.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from textual.content import Content

from kvtop.runner.units import fmt_int, fmt_rate, fmt_seconds, nice_ticks, tick_labels  # noqa: F401 (re-exported)
from kvtop.tui.base.format import pack
from kvtop.tui.panes.base import PaneWidget

CEILING_SPAN = 3.0  # the ceiling is drawn when it is at most this many times the measured top
MAX_STALL_MARKS = 24  # the longest stalls are marked; more lines would hide the series
PASS_MARK = "▲"  # a verify pass that made more than one token, on the chart's bottom row

Point = tuple[float, float]


def bucket_series(series, buckets: int) -> list[Point]:
    """At most ``buckets`` points: the series split into equal runs, each drawn at its
    mean position with its mean rate.

    A braille chart has two dots per column, so more points than that cannot be
    seen, while plotext's cost grows with the points it is given (measured here: 4 ms
    for 140 points, 39 ms for 4,096), and that time is taken from decode on a small
    machine."""
    n = len(series)
    if buckets < 1 or n == 0:
        return []
    if n <= buckets:
        return [(float(p), float(r)) for p, r in series]
    out = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        run = series[lo:hi]
        out.append((sum(p for p, _ in run) / len(run), sum(r for _, r in run) / len(run)))
    return out


def split_at_stalls(series, stalls) -> list[list[tuple[int, float]]]:
    """The series in runs: a new run starts at the first point at or after each stall."""
    marks = sorted(p for p, _ in stalls)
    runs: list[list[tuple[int, float]]] = [[]]
    i = 0
    for point in series:
        crossed = False
        while i < len(marks) and marks[i] <= point[0]:
            crossed, i = True, i + 1
        if crossed and runs[-1]:
            runs.append([])
        runs[-1].append(point)
    return [r for r in runs if r]


@dataclass
class ChartPlan:
    """What to draw, decided without plotext (so it can be tested as numbers)."""

    runs: list[list[Point]] = field(default_factory=list)  # measured, one line per run
    ceiling: list[Point] = field(default_factory=list)  # the bandwidth ceiling at the same positions
    ceiling_drawn: bool = False
    ceiling_top: float | None = None  # the ceiling's highest value (at the smallest depth)
    ceiling_last: float | None = None  # at the series' last position, as the summary above states it
    measured_top: float = 0.0
    measured_last: float = 0.0  # the latest point, where ``ceiling_last`` is taken
    y_top: float = 1.0
    x_range: tuple[float, float] = (0.0, 1.0)
    stalls: list[tuple[int, float]] = field(default_factory=list)  # marked, the longest first
    stall_count: int = 0
    passes: list[tuple[int, int]] = field(default_factory=list)  # marked: (KV position, tokens), at most one a column
    pass_count: int = 0  # the turn's verify passes of more than one token
    pass_most: int = 0  # the most tokens one made
    pass_least: int = 0  # and the fewest

    @property
    def empty(self) -> bool:
        return not self.runs


def plan_chart(series, stalls, ceiling_at: Callable[[int], float | None], buckets: int, passes=()) -> ChartPlan:
    plan = ChartPlan()
    if not series:
        return plan
    n = len(series)
    for run in split_at_stalls(series, stalls):  # each run gets its share of the buckets
        plan.runs.append(bucket_series(run, max(1, round(buckets * len(run) / n))))
    xs = [x for run in plan.runs for x, _ in run]
    plan.measured_top = max(y for run in plan.runs for _, y in run)
    # the latest token's own rate, not its bucket's mean: the buckets follow the chart's width,
    # and the legend's "Nx the measured rate" read 8x at 80 columns and 7x at 160 (new-user trial)
    plan.measured_last = float(series[-1][1])
    ceiling = [(x, ceiling_at(round(x))) for x in xs]
    if ceiling and all(c is not None and c > 0 for _, c in ceiling):
        plan.ceiling = ceiling
        plan.ceiling_top = max(c for _, c in ceiling)
        # at the last token's own position (a bucket's is the mean of its tokens'), as the pane says it
        plan.ceiling_last = ceiling_at(series[-1][0]) or ceiling[-1][1]
        plan.ceiling_drawn = plan.ceiling_top <= CEILING_SPAN * plan.measured_top
    top = max(plan.measured_top, plan.ceiling_top if plan.ceiling_drawn else 0.0)
    plan.y_top = top * (1.1 if plan.ceiling_drawn else 1.2) or 1.0
    lo, hi = min(xs), max(xs)
    plan.x_range = (lo, hi if hi > lo else lo + 1)
    plan.stalls = sorted(stalls, key=lambda s: -s[1])[:MAX_STALL_MARKS]
    plan.stall_count = len(stalls)
    plan_passes(plan, passes, buckets // 2)
    return plan


def plan_passes(plan: ChartPlan, passes, columns: int) -> None:
    """The turn's verify passes, one mark a column (the one of most tokens; a mark a pass
    would be a solid row when a pass comes every few tokens), inside the chart's span
    (the points' is their buckets' means)."""
    lo, hi = plan.x_range
    shown = [(min(max(p, lo), hi), n) for p, n in passes]
    plan.pass_count, plan.pass_most = len(shown), max((n for _, n in shown), default=0)
    plan.pass_least = min((n for _, n in shown), default=0)
    per_column: dict[int, tuple[int, int]] = {}
    for p, n in shown:
        col = int((p - lo) / (hi - lo) * max(columns - 1, 1))
        if col not in per_column or n > per_column[col][1]:
            per_column[col] = (p, n)
    plan.passes = sorted(per_column.values())


def draw(plt, plan: ChartPlan, colors: dict[str, tuple[int, int, int]], width: int, height: int) -> None:
    """Draw ``plan`` on a cleared plotext figure of ``width`` x ``height`` cells."""
    plt.title("tok/s by KV position")
    if plan.empty:
        return
    for run in plan.runs:
        plt.plot([x for x, _ in run], [y for _, y in run], marker="braille", color=colors["measured"])
    if plan.ceiling_drawn:
        plt.plot([x for x, _ in plan.ceiling], [c for _, c in plan.ceiling], marker="braille",
                 color=colors["ceiling"])
    for pos, _seconds in plan.stalls:
        plt.vline(pos, colors["stall"])
    if plan.passes:  # on the bottom row, under the line: the line stays readable
        plt.scatter([p for p, _ in plan.passes], [0.0] * len(plan.passes), marker=PASS_MARK,
                    color=colors.get("pass", colors["measured"]))
    lo, hi = plan.x_range
    xt = nice_ticks(math.ceil(lo), math.floor(hi), max(2, width // 10))
    rows = height - 4  # the title, the plot's borders and the x labels take the rest
    yt = nice_ticks(0, plan.y_top, max(2, min(6, rows // 3 + 1)), whole=plan.y_top >= 5)
    plt.xticks(xt, tick_labels(xt))
    plt.yticks(yt, tick_labels(yt))
    plt.xlim(lo, hi)
    plt.ylim(0, plan.y_top)


def legend_items(plan: ChartPlan, short: bool = False) -> list[Content]:
    return [item for _, item in legend_parts(plan, short)]


def legend_parts(plan: ChartPlan, short: bool = False) -> list[tuple[str, Content]]:
    """The legend's phrases, each with its kind: the lines, the ceiling when it is above the scale, the stalls.
    A narrow legend is broken between them (``ChartLegend``), never inside one: word-wrapped,
    "bandwidth" ended a line and "ceiling" began the next. ``short``: the forms a squeezed
    pane has room for (after a speculative turn the summary's lines left the legend one line
    at 160x48, and the verify passes' phrase was cut)."""
    if plan.empty:
        return []
    items = [("measured", Content.assemble(("━ ", "$kvtop-measured"), ("measured", "$text-muted")))]
    if plan.ceiling_drawn:
        items.append(("ceiling", Content.assemble(("━ ", "$kvtop-ceiling"), ("bandwidth ceiling", "$text-muted"))))
    elif plan.ceiling_last is not None:
        times = plan.ceiling_last / (plan.measured_last or plan.measured_top)  # both at the last position
        # its figure is the summary's, above the chart (at the depth of the latest token): stated
        # here too, from the chart's last redraw seconds before, the two disagreed ("50.9" beside "52.4")
        note = "x: above the chart" if short else "x the measured rate: above the chart"
        items += [("ceiling", Content.assemble(("↑ ", "$kvtop-ceiling"), ("bandwidth ceiling", "$text-muted"))),
                  ("ceiling", Content.styled(f"{fmt_int(round(times))}{note}", "$text-muted"))]
    if plan.pass_count:
        n, most, least = plan.pass_count, plan.pass_most, plan.pass_least
        size = fmt_int(most) if least == most else f"{fmt_int(least)}–{fmt_int(most)}"
        # the tokens each gave (kept), not the batch it checked: "each verify pass of 49 tok"
        # in the speculation line is that batch
        what = (f"{fmt_int(n)} pass{'es' if n > 1 else ''}: {size} tok" if short else
                f"{fmt_int(n)} verify pass{'es' if n > 1 else ''} gave {size} tok")
        items.append(("passes", Content.assemble((f"{PASS_MARK} ", "$kvtop-ok"),
                                                 (what + (" each" if n > 1 else ""), "$text-muted"))))
    if plan.stalls:
        pos, seconds = plan.stalls[0]
        n = plan.stall_count
        items.append(("stall", Content.assemble(
            ("│ ", "$kvtop-warn"),
            (f"{fmt_int(n)} stall{'s' if n > 1 else ''}" + (", longest " if n > 1 else " of "), "$text-muted"),
            (f"{fmt_seconds(seconds)} at {fmt_int(pos)}", "$kvtop-warn"))))
    return items


DROPPED_FIRST = ("measured", "stall", "ceiling")  # the one line's key; the stalls' lines are marked;
# the summary states the ceiling: the verify passes' marks have nothing else to say what they are


def fitting_legend(plan: ChartPlan, width: int, lines: int) -> list[Content]:
    """The legend's items in their full forms when they fit ``lines`` lines of ``width``
    and the short forms take no fewer, else the short forms, else the short forms less
    the kinds in ``DROPPED_FIRST``, one kind at a time, until they fit (a width or room
    not known yet, -1: the full forms).
    At 80x24 a speculative turn's summary left the legend one line."""
    full = legend_items(plan)
    if width <= 0 or lines < 0:
        return full
    # the short forms where they take fewer lines: at 120 columns "8x the measured rate: above
    # the chart" sat alone on the legend's second line (new-user trial)
    n_full, short = len(pack(full, width)), legend_items(plan, short=True)
    if n_full <= lines and n_full <= len(pack(short, width)):
        return full
    if len(pack(short, width)) < min(n_full, lines + 1):
        return short
    parts = legend_parts(plan, short=True)
    for kind in (None, *DROPPED_FIRST):
        parts = [(k, item) for k, item in parts if k != kind]
        items = [item for _, item in parts]
        if len(pack(items, width)) <= lines:
            return items
    return items


def legend(plan: ChartPlan, width: int = 0) -> Content:
    """The legend as lines of ``width`` cells (0: one line)."""
    return Content("\n").join(pack(legend_items(plan), width))


class ChartLegend(PaneWidget):
    """The chart's legend, under it: one line, wrapped to a few in a narrow pane."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.items: list[Content] = []

    def show(self, items: list[Content]) -> None:
        before = self.wrapped_height()
        self.items = items
        self.refresh(layout=self.wrapped_height() != before)

    def height_at(self, width: int) -> int:
        return len(pack(self.items, width)) if width > 0 else -1

    def render(self) -> Content:
        return Content("\n").join(pack(self.items, self.content_region.width))
