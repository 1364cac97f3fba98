"""Decode speed against its ceilings, and tok/s per KV position as a chart.

The bandwidth ceiling is bandwidth / (active weight bytes + KV bytes read at the
current depth), so it falls as the context grows; the chart (``decode_chart.py``)
shows the measured rate per KV position, so a user sees decode slow down with depth,
with the ceiling drawn beside it when it is on the same scale.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Size

from kvtop.runner.physics.here import Here
from kvtop.runner.physics.roofline import binding_ceiling
from kvtop.runner.physics.spec_roof import spec_roof_phrases, spec_roof_short, turn_roof
from kvtop.runner.policy.speculation import PAID, spec_phrases, spec_short, speedup
from kvtop.tui.base.format import fmt_int, fmt_rate, fmt_seconds, pack
from kvtop.tui.panes.base import PanePlot, PaneWidget
from kvtop.tui.panes.decode_chart import ChartLegend, draw, fitting_legend, plan_chart

CHART_MIN_ROWS = 6  # app.tcss: #decode-chart's min-height
# the chart's rows the summary leaves before its speculation lines take their short forms:
# 3 plot rows (the full lines left a 160x48 chart 2, after a trial's copy prompt), and the
# legend's (its full forms take 3 lines in a 40-column pane, 1-2 from 60)
CHART_WANT_ROWS = 7
NARROW = 60
LEGEND_MAX_ROWS = 3  # and #decode-legend's max-height


class DecodeSummary(PaneWidget):
    """Three fixed lines (more after a speculative turn); ``refresh`` re-lays out only
    when the line count changes. Each line comes in a full and a short form, the short one
    where the full one would be wrapped (80x24 gives the pane 40 columns: "compute ceiling
    930 tok/s  bandwidth-bound" wrapped its last word); the speculation line is phrases,
    packed onto as many lines as the width needs (it was clipped at the pane's edge)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.lines: list[tuple[Content, Content] | list[Content]] = []
        self.short: list[Content] = []  # the speculation lines' short forms, one line each
        self.max_lines = 0  # more lines than this (0: no limit): the short forms

    def show(self, lines: list[tuple[Content, Content] | list[Content]], short: list[Content] | None = None) -> None:
        width = self.content_region.width
        before = len(self.at(width))
        self.lines, self.short = lines, short or []
        self.refresh(layout=len(self.at(width)) != before)

    def fit(self, max_lines: int) -> None:
        """The pane's room for the summary (the chart keeps ``CHART_WANT_ROWS``)."""
        if max_lines != self.max_lines:
            before = len(self.at(self.content_region.width))
            self.max_lines = max_lines
            self.refresh(layout=len(self.at(self.content_region.width)) != before)

    def at(self, width: int) -> list[Content]:
        out: list[Content] = []
        for entry in self.lines:
            if isinstance(entry, list):
                out.extend(pack(entry, width, " "))
            else:
                full, short = entry
                out.append(full if width <= 0 or full.cell_length <= width else short)
        fixed = sum(1 for e in self.lines if not isinstance(e, list))
        if self.short and self.max_lines and len(out) > self.max_lines:
            out = out[:fixed] + [line for s in self.short for line in pack([s], width, " ")]
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.at(width)) if width else 0

    def height_at(self, width: int) -> int:
        return len(self.at(width)) if width > 0 else -1

    def on_resize(self) -> None:
        if any(isinstance(e, list) for e in self.lines):
            self.refresh(layout=True)

    def render(self) -> Content:
        return Content("\n").join(self.at(self.content_region.width))


class DecodePane(Vertical):
    idle_label = "no turn yet"  # kvtop load's view: no chat turn, the load is elsewhere
    def __init__(self, chart_interval: float = 4.0, **kw) -> None:
        super().__init__(**kw)
        self.chart_interval = chart_interval  # seconds between chart redraws while decoding (plotext is not cheap)
        self.border_title = "Decode"
        self.here: Here | None = None  # the machine model the ceilings come from, once known
        self.rate: float | None = None
        self.pos = 0
        self.series: tuple[tuple[int, float], ...] = ()
        self.stalls: tuple[tuple[int, float], ...] = ()  # (KV position after a pause, seconds)
        self.passes: tuple[tuple[int, int], ...] = ()  # verify passes of more than one token (KV position, tokens)
        self.marks_passes = False  # the turn's engine speculates: its bursts of tokens are verify passes
        self.state = "idle"
        self._last_chart = -1.0
        self._updated_at: float | None = None  # when the last decode update came (monotonic)
        self.waiting_s: float | None = None  # no token for this long: said instead of a stale rate
        self.spec: list[str] | None = None  # the last turn's speculation phrases (runner/policy/speculation.py)
        self.spec_paid = True
        self.roof: list[str] | None = None  # the speculative roof beside the plain ceilings
        self.roof_tok_s: float | None = None  # and its rate: what a speculative turn's rate is a share of
        self.spec_short: str | None = None  # both in 40 cells, where the chart needs the rows
        self.roof_short: str | None = None
        self.summary = DecodeSummary()

    def compose(self) -> ComposeResult:
        yield self.summary
        yield PanePlot(id="decode-chart")
        yield ChartLegend(id="decode-legend")

    def on_mount(self) -> None:
        self._show()

    def set_idle_label(self, label: str) -> None:
        """What the rate says before any turn (``kvtop load``: no chat turn runs)."""
        self.idle_label = label
        self._show()

    def set_here(self, here: Here | None) -> None:
        """The model on this machine is known (or changed: the loaded n_ctx, a re-probed
        CPU): show its ceilings (at depth 0) before the first turn."""
        self.here = here
        self._show()

    def ceilings(self, depth: int) -> tuple[float | None, float | None]:
        """(bandwidth, compute) ceilings at ``depth``, as the machine model computes them."""
        return self.here.ceilings(depth) if self.here is not None else (None, None)

    def begin(self, now: float, marks_passes: bool = False) -> None:
        """The chart's first redraw in a turn waits half an interval: it is the costliest
        redraw (drawn as decode starts, it stalls the first tokens), and waiting a whole
        one would leave a first turn's chart empty for seconds."""
        self._last_chart = now - self.chart_interval / 2
        self.marks_passes = marks_passes

    def note_waiting(self, now: float, after_s: float) -> None:
        """Once a second: a decoding turn that has sent no token for ``after_s`` says so
        (a swap-in, a stopped engine) instead of its last rate, which would read as live."""
        if self.state != "decoding" or self._updated_at is None:
            return
        waited = now - self._updated_at
        waiting = waited if waited >= after_s else None
        if waiting != self.waiting_s:
            self.waiting_s = waiting
            self._show()

    def update_live(self, u, now: float) -> None:
        self._updated_at, self.waiting_s = time.monotonic(), None
        self.state = "decoding"
        self.rate, self.pos, self.series, self.stalls, self.passes = u.tok_s, u.pos, u.series, u.stalls, u.passes
        self._show()
        if now - self._last_chart >= self.chart_interval:
            self._last_chart = now
            self._draw_chart()

    def clear(self) -> None:
        """A new chat: no turn yet (the cancelled turn's rate, depth and chart go)."""
        self.state, self.rate, self.pos, self.series, self.stalls, self.passes = "idle", None, 0, (), (), ()
        self.waiting_s, self.spec, self.roof, self.roof_tok_s = None, None, None, None
        self.spec_short = self.roof_short = None
        self._show()
        self._draw_chart()

    SHOWN = ("state", "rate", "pos", "series", "stalls", "spec", "spec_paid", "passes", "marks_passes",
             "spec_short", "roof", "roof_tok_s", "roof_short")  # a finished turn's, for Ctrl+Z

    def shown(self) -> tuple:
        return tuple(getattr(self, name) for name in self.SHOWN)

    def show(self, shown: tuple) -> None:
        """The turn ``shown`` took, again (Ctrl+Z brings back a chat and its last turn's figures)."""
        for name, value in zip(self.SHOWN, shown):
            setattr(self, name, value)
        self.waiting_s = None
        self._show()
        self._draw_chart()

    def lost(self) -> None:
        """The turn was lost (its server went away): its last rate stays, said as the rate
        before the loss, and no "no token for …" counts on while nothing decodes."""
        if self.state == "decoding":
            self.state, self.waiting_s = "lost", None
            self._show()

    def on_resize(self) -> None:
        self._fit_summary()
        if self.series:  # the points per column depend on the chart's width
            self._draw_chart()

    def finish(self, metrics, series, stalls=(), passes=()) -> None:
        self.state, self.waiting_s = "done", None
        self.rate = metrics.decode_tok_s
        self.pos = max(0, metrics.kv_cells_used - 1)
        self.spec, self.spec_short = spec_phrases(metrics), spec_short(metrics)
        roof = turn_roof(self.here, metrics, self.pos)
        self.roof, self.roof_tok_s = spec_roof_phrases(roof), roof.roof_tok_s if roof else None
        self.roof_short = spec_roof_short(roof)
        x = speedup(metrics)
        self.spec_paid = x is None or x >= PAID
        if series:
            self.series, self.stalls, self.passes = series, stalls, passes
        self._show()
        self._draw_chart()

    def _show(self) -> None:
        bw, comp = self.ceilings(self.pos)
        ceiling, binding = binding_ceiling(bw, comp)
        # several tokens a pass: the turn is a share of the speculative roof, when it is the
        # higher (a roof under the plain ceiling is no ceiling: the turn could decode plainly)
        spec_done = self.state == "done" and self.roof_tok_s is not None and self.roof_tok_s > (ceiling or 0.0)
        if spec_done:
            ceiling = self.roof_tok_s
        pct = self.rate / ceiling * 100 if self.rate and ceiling else None
        style = "$kvtop-ok" if pct and pct >= 60 else "$kvtop-warn" if pct and pct >= 25 else "$kvtop-critical"
        label = {"done": "turn avg", "decoding": "live", "lost": "until lost"}.get(self.state, self.idle_label)
        first = Content.assemble((fmt_rate(self.rate), "bold $kvtop-measured"), (f" {label}", "$text-muted"),
                                 "  ", (f"{pct:.0f}% of {'spec roof' if spec_done else 'ceiling'}"
                                        if pct is not None else "", style))
        if self.waiting_s is not None:
            first = Content.assemble((f"no token for {fmt_seconds(self.waiting_s)}", "bold $kvtop-critical"),
                                     (f" (was {fmt_rate(self.rate)})", "$text-muted"))
        bound = (f"{binding}-bound" if binding else "", "bold")
        lines = [
            (first, first),
            (Content.assemble(("bandwidth ceiling ", "$text-muted"), (fmt_rate(bw), "$kvtop-ceiling"),
                              (f" at depth {fmt_int(self.pos)}", "$text-muted")),
             Content.assemble(("bandwidth ceiling ", "$text-muted"), (fmt_rate(bw), "$kvtop-ceiling"),
                              (f" at {fmt_int(self.pos)}", "$text-muted"))),
            (Content.assemble(("compute ceiling ", "$text-muted"), fmt_rate(comp), "  ", bound),
             Content.assemble(("compute ", "$text-muted"), fmt_rate(comp), "  ", bound)),
        ]
        short = []
        if self.spec:  # plain text from numbers and the --spec-type names kvtop checked
            style = "$kvtop-ok" if self.spec_paid else "bold $kvtop-warn"
            lines.append([Content.styled(p, style) for p in self.spec])
            short += [Content.styled(self.spec_short, style)] if self.spec_short else []
        if self.roof:
            lines.append([Content.styled(p, "$text-muted") for p in self.roof])
            short += [Content.styled(self.roof_short, "$text-muted")] if self.roof_short else []
        self.summary.show(lines, short)
        self._fit_summary()

    def _fit_summary(self) -> None:
        height, width = self.content_region.height, self.content_region.width
        legend = LEGEND_MAX_ROWS if width < NARROW else 1
        self.summary.fit(max(3, height - CHART_WANT_ROWS - legend) if height > 0 else 0)

    def _color(self, var: str) -> tuple[int, int, int]:
        value = self.app.theme_variables.get(var, "#ff0000")
        c = Color.parse(value)
        return (c.r, c.g, c.b)

    def redraw_chart(self) -> None:
        """A new theme: draw the chart in its colours."""
        self._draw_chart()

    def _draw_chart(self) -> None:
        chart = self.query_one(PanePlot)
        plt = chart.plt
        plt.clear_data()
        plt.clear_figure()
        width, height = chart.size.width or 80, chart.size.height or 10
        plan = plan_chart(self.series, self.stalls, lambda depth: self.ceilings(depth)[0], 2 * width,
                          self.passes if self.marks_passes else ())
        colors = {k: self._color(f"kvtop-{v}") for k, v in
                  (("measured", "measured"), ("ceiling", "ceiling"), ("stall", "warn"), ("pass", "ok"))}
        draw(plt, plan, colors, width, height)
        chart.refresh()
        legend = self.query_one(ChartLegend)
        # the rows the chart leaves the legend: after a speculative turn the summary has more lines
        room = self.content_region.height - self.summary.wrapped_height() - CHART_MIN_ROWS
        room = -1 if self.content_region.height <= 0 else max(0, room)
        legend.show(fitting_legend(plan, legend.content_region.width, min(room, LEGEND_MAX_ROWS)))
