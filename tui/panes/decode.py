"""Decode speed against its ceilings, and tok/s per KV position as a chart.

The bandwidth ceiling is bandwidth / (active weight bytes + KV bytes read at the
current depth), so it falls as the context grows; the chart draws it beside the
measured rate so a user sees decode slow down with depth.
"""

from __future__ import annotations

from typing import Callable

from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Vertical
from textual.content import Content

from runner.physics.roofline import binding_ceiling

from ..format import fmt_int, fmt_rate
from .base import PaneWidget, PanePlot

Ceilings = Callable[[int], tuple[float | None, float | None]]


def bucket_series(series, buckets: int) -> list[tuple[float, float]]:
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


class DecodeSummary(PaneWidget):
    """Three fixed lines; ``refresh`` without a re-layout."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.content = Content("")

    def show(self, content: Content) -> None:
        self.content = content
        self.refresh()

    def render(self) -> Content:
        return self.content


class DecodePane(Vertical):
    def __init__(self, chart_interval: float = 4.0, **kw) -> None:
        super().__init__(**kw)
        self.chart_interval = chart_interval  # seconds between chart redraws while decoding (plotext is not cheap)
        self.border_title = "Decode"
        self.ceilings: Ceilings = lambda depth: (None, None)
        self.rate: float | None = None
        self.pos = 0
        self.series: tuple[tuple[int, float], ...] = ()
        self.state = "idle"
        self._last_chart = -1.0

    def compose(self) -> ComposeResult:
        yield DecodeSummary()
        yield PanePlot(id="decode-chart")

    def on_mount(self) -> None:
        self._show()

    def set_ceilings(self, ceilings: Ceilings) -> None:
        """The model is known: show its ceilings (at depth 0) before the first turn."""
        self.ceilings = ceilings
        self._show()

    def begin(self, now: float) -> None:
        """The chart's first redraw in a turn waits half an interval: it is the costliest
        redraw (drawn as decode starts, it stalls the first tokens), and waiting a whole
        one would leave a first turn's chart empty for seconds."""
        self._last_chart = now - self.chart_interval / 2

    def update_live(self, u, now: float) -> None:
        self.state = "decoding"
        self.rate, self.pos, self.series = u.tok_s, u.pos, u.series
        self._show()
        if now - self._last_chart >= self.chart_interval:
            self._last_chart = now
            self._draw_chart()

    def on_resize(self) -> None:
        if self.series:  # the points per column depend on the chart's width
            self._draw_chart()

    def finish(self, metrics, series) -> None:
        self.state = "done"
        self.rate = metrics.decode_tok_s
        self.pos = max(0, metrics.kv_cells_used - 1)
        if series:
            self.series = series
        self._show()
        self._draw_chart()

    def _show(self) -> None:
        bw, comp = self.ceilings(self.pos)
        ceiling, binding = binding_ceiling(bw, comp)
        pct = self.rate / ceiling * 100 if self.rate and ceiling else None
        style = "$kvtop-ok" if pct and pct >= 60 else "$kvtop-warn" if pct and pct >= 25 else "$kvtop-critical"
        label = {"done": "turn avg", "decoding": "live"}.get(self.state, "no turn yet")
        lines = [
            Content.assemble((fmt_rate(self.rate), "bold $kvtop-measured"), (f" {label}", "$text-muted"),
                             "  ", (f"{pct:.0f}% of ceiling" if pct is not None else "", style)),
            Content.assemble(("bandwidth ceiling ", "$text-muted"), (fmt_rate(bw), "$kvtop-ceiling"),
                             (f" at depth {fmt_int(self.pos)}", "$text-muted")),
            Content.assemble(("compute ceiling ", "$text-muted"), fmt_rate(comp), "  ",
                             (f"{binding}-bound" if binding else "", "bold")),
        ]
        self.query_one(DecodeSummary).show(Content("\n").join(lines))

    def _color(self, var: str) -> tuple[int, int, int]:
        value = self.app.theme_variables.get(var, "#ff0000")
        c = Color.parse(value)
        return (c.r, c.g, c.b)

    def _draw_chart(self) -> None:
        chart = self.query_one(PanePlot)
        plt = chart.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("tok/s by KV position")
        points = bucket_series(self.series, 2 * (chart.size.width or 80))
        if points:
            xs = [p for p, _ in points]
            ys = [r for _, r in points]
            ceil = [self.ceilings(round(x))[0] for x in xs]
            plt.plot(xs, ys, marker="braille", color=self._color("kvtop-measured"), label="measured")
            if all(c is not None for c in ceil):
                plt.plot(xs, ceil, marker="braille", color=self._color("kvtop-ceiling"), label="ceiling")
            top = max(ys + [c for c in ceil if c is not None])
            plt.ylim(0, top * 1.1)
        chart.refresh()
