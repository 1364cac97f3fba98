"""The load pane of ``kvtop load``: the curve filling in as each level ends.

Throughput against users, with the batched roof (B x bandwidth / (weights + sum of
KV)) drawn over it, and each user's rate under it: batching shares each read of the
weights, so the total climbs toward the roof while each user's rate falls. Under the
chart, one line per level with TTFT p95 and the knee: the most users that still meet
``--slo-ttft`` and ``--slo-tok-s``. What to draw is planned without plotext
(``plan_load_chart``) so it is tested as numbers.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content

from kvtop.runner.commands.load_chart import LoadChartPlan, ceiling, level_rows, plan_load_chart
from kvtop.runner.commands.load_output import outcomes
from kvtop.runner.units import fmt_rate, nice_ticks, tick_labels
from kvtop.tui.panes.base import PanePlot, PaneStatic

__all__ = ["LoadChartPlan", "LoadPane", "ceiling", "draw", "level_rows", "plan_load_chart", "table"]


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


def table(rows: list[dict], plan: LoadChartPlan, roof: str | None = None) -> Content:
    """The legend, the roof's formula with its inputs (``roof``), and one line per level,
    each with why its rate is not explained and the busy machine, when so."""
    parts: list = [("━ ", "$kvtop-measured"), ("all users  ", "$text-muted"), ("━ ", "$kvtop-ok"),
                   ("per user  ", "$text-muted")]
    if plan.roof:
        parts += [("━ ", "$kvtop-ceiling"), ("roof (bandwidth or compute)  ", "$text-muted")]
    elif plan.roof_above:
        parts += [("↑ ", "$kvtop-ceiling"), (plan.roof_above + "  ", "$text-muted")]
    if plan.knee is not None:
        parts += [("│ ", "$kvtop-warn"), (f"knee at {plan.knee:g}", "$text-muted")]
    lines = [Content.assemble(*parts)]
    if roof:
        lines.append(Content.styled(roof, "$text-muted"))
    for r in level_rows(rows):
        level = f"{r['users']} user{'s' if r['users'] != 1 else ''}" if r["users"] is not None else f"{r['rate']:g}/s"
        ttft = "?" if r["ttft_p95_s"] is None else f"{r['ttft_p95_s']:.2f} s"
        roof = f", roof {fmt_rate(ceiling(r))}" if ceiling(r) else ""
        failed = f", {outcomes(r)}" if r["failed"] else ""  # 2 truncated, 1 refused
        if r.get("partial"):
            level += " (partial)"
        lines.append(Content(f"{level:>9}: {fmt_rate(r['gen_tok_s'])} in all, {fmt_rate(r['per_user_gen_tok_s'])} "
                             f"each, TTFT p95 {ttft}{roof}; {r['completed']} ok{failed}"))
        busy = r.get("busy") and f"other processes used {r['others_cpu_share']:.0%} of the CPU: figures are low"
        for word, why in (("not explained", r.get("unexplained")), ("busy", busy)):
            if why:
                lines.append(Content.assemble(("           ! ", "$kvtop-warn"), (f"{word}: {why}", "$kvtop-warn")))
    return Content("\n").join(lines)


class LoadPane(Vertical):
    def __init__(self, slo_ttft: float | None = None, slo_tok_s: float | None = None, **kw) -> None:
        super().__init__(**kw)
        self.rows: list[dict] = []
        self.slo = (slo_ttft, slo_tok_s)
        self.roof: str | None = None  # the roof's formula with its inputs (or why there is none)

    def compose(self) -> ComposeResult:
        yield PanePlot(id="load-chart")
        with VerticalScroll(id="load-lines"):  # a small terminal: the lines scroll, the chart keeps its rows
            yield PaneStatic(Content(""), id="load-table", markup=False)

    def set_roof(self, text: str) -> None:
        self.roof = text
        self.redraw()

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
        self.query_one("#load-table", PaneStatic).update(table(self.rows, plan, self.roof))
        scroll = self.query_one("#load-lines")
        scroll.call_after_refresh(scroll.scroll_end, animate=False)  # the newest level in view
