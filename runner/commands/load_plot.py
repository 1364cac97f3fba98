"""``kvtop load --plot FILE.svg``: the live view's chart as an SVG file, written here (no
plotting library needed), from the same plan (runner/commands/load_chart.py): all
users' tok/s and each user's rate against users, the roof over them when it is within
the scale (else named in the legend: a roof 50x above squashed the measured lines flat
on the x axis), labelled ticks on both axes, a grid line at each y tick, the knee.
"""

from __future__ import annotations

from collections.abc import Callable

from kvtop.runner.commands.common import Report
from kvtop.runner.commands.load_chart import LoadChartPlan, plan_load_chart
from kvtop.runner.units import nice_ticks, tick_labels

W, H = 900, 480
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 84, 56  # the plot's margins: room for the y labels, the legend, the x axis
COLOURS = {"measured": "#1f77b4", "per_user": "#2ca02c", "roof": "#d62728", "knee": "#ff7f0e"}


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def x_range(xs: list[float]) -> tuple[float, float]:
    lo, hi = min(xs), max(xs)
    pad = (hi - lo) * 0.05 or 0.5
    return lo - pad, hi + pad


def plot_svg(rows: list[Report], title: str, slo_ttft: float | None = None, slo_tok_s: float | None = None,
             roof_text: str | None = None) -> str:
    """The SVG's text; ``roof_text``: the roof's formula with its inputs, under the title."""
    plan = plan_load_chart(rows, slo_ttft, slo_tok_s)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14">{_esc(title)}</text>']
    for i, line in enumerate((roof_text or "").split("; ")[:2]):  # the formula, then what B is
        out.append(f'<text x="{LEFT}" y="{38 + 16 * i}" fill="#555">{_esc(line)}</text>')
    if not plan.xs:
        out.append(f'<text x="{LEFT}" y="{H // 2}">no level measured a rate</text>')
        return "\n".join(out + ["</svg>"])
    out += _axes(plan) + _lines(plan) + _legend(plan)
    return "\n".join(out + ["</svg>"])


def _scale(plan: LoadChartPlan) -> Callable[[float, float], tuple[float, float]]:
    lo, hi = x_range(plan.xs)

    def px(x: float, y: float) -> tuple[float, float]:
        return (LEFT + (W - LEFT - RIGHT) * (x - lo) / (hi - lo),
                H - BOTTOM - (H - TOP - BOTTOM) * y / plan.y_top)

    return px


def _axes(plan: LoadChartPlan) -> list[str]:
    px = _scale(plan)
    x0, y0 = px(x_range(plan.xs)[0], 0)
    out = []
    yt = nice_ticks(0, plan.y_top, 6, whole=plan.y_top >= 5)
    for t, label in zip(yt, tick_labels(yt)):
        _, Y = px(0, t)
        out.append(f'<line x1="{LEFT}" y1="{Y:.1f}" x2="{W - RIGHT}" y2="{Y:.1f}" stroke="#e6e6e6"/>')
        out.append(f'<text x="{LEFT - 6}" y="{Y + 4:.1f}" text-anchor="end">{label}</text>')
    for x in plan.xs:
        X, _ = px(x, 0)
        out.append(f'<line x1="{X:.1f}" y1="{y0:.1f}" x2="{X:.1f}" y2="{y0 + 5:.1f}" stroke="black"/>')
        out.append(f'<text x="{X:.1f}" y="{y0 + 18:.1f}" text-anchor="middle">{x:g}</text>')
    out += [f'<line x1="{LEFT}" y1="{y0:.1f}" x2="{W - RIGHT}" y2="{y0:.1f}" stroke="black"/>',
            f'<line x1="{x0:.1f}" y1="{TOP}" x2="{x0:.1f}" y2="{y0:.1f}" stroke="black"/>',
            f'<text x="{(LEFT + W - RIGHT) / 2:.0f}" y="{H - 14}" text-anchor="middle">{_esc(plan.x_label)}</text>',
            f'<text x="16" y="{(TOP + H - BOTTOM) / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 16 {(TOP + H - BOTTOM) / 2:.0f})">tok/s</text>']
    return out


def _lines(plan: LoadChartPlan) -> list[str]:
    px = _scale(plan)
    out = []
    for name, ys in (("per_user", plan.per_user), ("measured", plan.measured), ("roof", plan.roof)):
        if not ys:
            continue
        pts = [px(x, y) for x, y in zip(plan.xs, ys)]
        dash = ' stroke-dasharray="6 4"' if name == "roof" else ""
        out.append(f'<polyline class="{name}" points="{" ".join(f"{X:.1f},{Y:.1f}" for X, Y in pts)}" '
                   f'fill="none" stroke="{COLOURS[name]}" stroke-width="2"{dash}/>')
        out += [f'<circle cx="{X:.1f}" cy="{Y:.1f}" r="3" fill="{COLOURS[name]}"/>' for X, Y in pts]
        if name == "per_user":  # a level whose rate the roof and the load do not explain (the md's notes say why)
            out += [f'<text class="unexplained" x="{X + 6:.1f}" y="{Y - 6:.1f}" fill="{COLOURS["knee"]}" '
                    f'font-weight="bold">! not explained</text>' for (X, Y), bad in zip(pts, plan.flagged) if bad]
    if plan.knee is not None:
        X, Y = px(plan.knee, plan.y_top)
        _, y0 = px(plan.knee, 0)
        out.append(f'<line class="knee" x1="{X:.1f}" y1="{Y:.1f}" x2="{X:.1f}" y2="{y0:.1f}" '
                   f'stroke="{COLOURS["knee"]}" stroke-dasharray="2 3"/>')
    return out


def _legend(plan: LoadChartPlan) -> list[str]:
    items = [("measured", "all users, tok/s"), ("per_user", "per user, tok/s")]
    if plan.roof:
        items.append(("roof", "roof (bandwidth or compute, the lower)"))
    elif plan.roof_above:
        items.append(("roof", "\u2191 " + plan.roof_above))
    if plan.knee is not None:
        items.append(("knee", f"knee at {plan.knee:g}"))
    out, x = [], float(LEFT)
    for name, text in items:
        out.append(f'<rect x="{x:.0f}" y="{TOP - 14}" width="14" height="3" fill="{COLOURS[name]}"/>')
        out.append(f'<text x="{x + 18:.0f}" y="{TOP - 9}" fill="{COLOURS[name]}">{_esc(text)}</text>')
        x += 26 + 6.6 * len(text)
    return out


def write_plot(path: str, rows: list[Report], title: str, slo_ttft: float | None = None,
               slo_tok_s: float | None = None, roof_text: str | None = None) -> None:
    """An SVG: kvtop installs no plotting library that writes PNG (the command refuses
    another extension before it runs)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(plot_svg(rows, title, slo_ttft, slo_tok_s, roof_text))
