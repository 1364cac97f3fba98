"""The load pane of ``kvtop load``: the curve filling in as each level ends.

Throughput against users, with the batched roof (B x bandwidth / (weights + sum of
KV)) drawn over it, and each user's rate under it: batching shares each read of the
weights, so the total climbs toward the roof while each user's rate falls. Under the
chart, one line per level with TTFT p95 and the knee: the most users that still meet
``--slo-ttft`` and ``--slo-tok-s``. What to draw is planned without plotext
(``plan_load_chart``) so it is tested as numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content

from kvtop.runner.commands.load_output import meets, outcomes
from kvtop.runner.units import fmt_rate
from kvtop.tui.panes.base import PanePlot, PaneStatic
from kvtop.tui.panes.decode_chart import nice_ticks, tick_labels


@dataclass
class LoadChartPlan:
    xs: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)
    per_user: list[float] = field(default_factory=list)
    roof: list[float] = field(default_factory=list)  # empty when any level has no roof, or it is off the scale
    roof_above: str | None = None  # the roof, named when it is too far above the curve to draw
    knee: float | None = None  # the level (x) the targets hold up to
    y_top: float = 1.0


ROOF_SCALE = 3.0  # the roof is drawn when at most this many times the curve's top, as the decode chart's ceiling


def level_rows(rows: list[dict]) -> list[dict]:
    """One row per level: a fleet's "all" rows, else the single server's."""
    alls = [r for r in rows if r["server"] == "all"]
    return alls or rows


def ceiling(r: dict) -> float | None:
    """The level's roof: the batched bandwidth roof or the compute roof, the lower, as
    the server pane's batched ceiling is (a trial saw 261 tok/s here beside the server
    pane's compute-bound 132 for the same 2 users)."""
    b, c = r.get("batched_roof_tok_s"), r.get("compute_roof_tok_s")
    return min(b, c) if b and c else b or None


def plan_load_chart(rows: list[dict], slo_ttft: float | None, slo_tok_s: float | None) -> LoadChartPlan:
    plan = LoadChartPlan()
    pts = [r for r in level_rows(rows) if r["gen_tok_s"] is not None]
    if not pts:
        return plan
    plan.xs = [float(r["users"] if r["users"] is not None else r["rate"]) for r in pts]
    plan.measured = [r["gen_tok_s"] for r in pts]
    plan.per_user = [r["per_user_gen_tok_s"] or 0.0 for r in pts]
    roof = [ceiling(r) for r in pts]
    top = max(plan.measured + plan.per_user + [1e-9])
    if all(roof) and max(roof) <= ROOF_SCALE * top:
        plan.roof = roof
    elif all(roof):  # a roof 20x above (a busy CPU, a bandwidth given for another machine) would
        # squash the curve onto the bottom row: the legend names it instead
        plan.roof_above = f"roof up to {fmt_rate(max(roof))}, {max(roof) / top:.0f}x: above the scale"
    if slo_ttft is not None or slo_tok_s is not None:
        ok = [x for x, r in zip(plan.xs, pts) if meets(r, slo_ttft, slo_tok_s)]
        plan.knee = max(ok) if ok else None
    plan.y_top = max(plan.measured + plan.per_user + plan.roof + [1.0]) * 1.1
    return plan


def draw(plt, plan: LoadChartPlan, colors: dict, width: int, height: int) -> None:
    plt.title("tok/s by users")
    if not plan.xs:
        return
    marker = "braille"
    plt.plot(plan.xs, plan.per_user, marker=marker, color=colors["per_user"])
    plt.plot(plan.xs, plan.measured, marker=marker, color=colors["measured"])  # on top where they cross
    if plan.roof:
        plt.plot(plan.xs, plan.roof, marker=marker, color=colors["ceiling"])
    if plan.knee is not None:
        plt.vline(plan.knee, colors["knee"])
    lo, hi = min(plan.xs), max(plan.xs)
    pad = (hi - lo) * 0.04 or 0.5  # the knee's line at the last level stays off the frame
    lo, hi = lo - pad, hi + pad
    yt = nice_ticks(0, plan.y_top, max(2, min(6, (height - 4) // 3 + 1)), whole=plan.y_top >= 5)
    plt.xticks(plan.xs, [f"{x:g}" for x in plan.xs])
    plt.yticks(yt, tick_labels(yt))
    plt.xlim(lo, hi)
    plt.ylim(0, plan.y_top)


def table(rows: list[dict], plan: LoadChartPlan) -> Content:
    """The legend and one line per level."""
    parts: list = [("━ ", "$kvtop-measured"), ("all users  ", "$text-muted"), ("━ ", "$kvtop-ok"),
                   ("per user  ", "$text-muted")]
    if plan.roof:
        parts += [("━ ", "$kvtop-ceiling"), ("roof (bandwidth or compute)  ", "$text-muted")]
    elif plan.roof_above:
        parts += [("↑ ", "$kvtop-ceiling"), (plan.roof_above + "  ", "$text-muted")]
    if plan.knee is not None:
        parts += [("│ ", "$kvtop-warn"), (f"knee at {plan.knee:g}", "$text-muted")]
    lines = [Content.assemble(*parts)]
    for r in level_rows(rows):
        level = f"{r['users']} user{'s' if r['users'] != 1 else ''}" if r["users"] is not None else f"{r['rate']:g}/s"
        ttft = "?" if r["ttft_p95_s"] is None else f"{r['ttft_p95_s']:.2f} s"
        roof = f", roof {fmt_rate(ceiling(r))}" if ceiling(r) else ""
        failed = f", {outcomes(r)}" if r["failed"] else ""  # 2 truncated, 1 refused
        if r.get("partial"):
            level += " (partial)"
        lines.append(Content(f"{level:>9}: {fmt_rate(r['gen_tok_s'])} in all, {fmt_rate(r['per_user_gen_tok_s'])} "
                             f"each, TTFT p95 {ttft}{roof}; {r['completed']} ok{failed}"))
    return Content("\n").join(lines)


class LoadPane(Vertical):
    def __init__(self, slo_ttft: float | None = None, slo_tok_s: float | None = None, **kw) -> None:
        super().__init__(**kw)
        self.rows: list[dict] = []
        self.slo = (slo_ttft, slo_tok_s)

    def compose(self) -> ComposeResult:
        yield PanePlot(id="load-chart")
        with VerticalScroll(id="load-lines"):  # a small terminal: the lines scroll, the chart keeps its rows
            yield PaneStatic(Content(""), id="load-table", markup=False)

    def add_rows(self, rows: list[dict]) -> None:
        self.rows += rows
        self.redraw()

    def _color(self, name: str):
        c = self.app.theme_variables.get(name) or "#888888"
        from textual.color import Color

        col = Color.parse(c)
        return (col.r, col.g, col.b)

    def redraw(self) -> None:
        chart = self.query_one(PanePlot)
        plt = chart.plt
        plt.clear_data()
        plt.clear_figure()
        plan = plan_load_chart(self.rows, *self.slo)
        colors = {k: self._color(f"kvtop-{v}") for k, v in
                  (("measured", "measured"), ("per_user", "ok"), ("ceiling", "ceiling"), ("knee", "warn"))}
        draw(plt, plan, colors, chart.size.width or 80, chart.size.height or 12)
        chart.refresh()
        self.query_one("#load-table", PaneStatic).update(table(self.rows, plan))
        scroll = self.query_one("#load-lines")
        scroll.call_after_refresh(scroll.scroll_end, animate=False)  # the newest level in view
