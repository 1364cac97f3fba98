"""What ``kvtop load`` draws, planned as numbers: the live view's load pane
(tui/panes/load.py, plotext) and ``--plot`` (runner/commands/load_plot.py, SVG) draw
the same plan, so the two follow one scale rule.

The curve (all users' tok/s and each user's) sets the scale; the roof (the lower of the
batched bandwidth roof and the compute roof, as the server pane's batched ceiling) is
drawn when it is at most ``ROOF_SCALE`` times the curve's top, and named above the scale
otherwise: a roof 50x above drew the measured lines flat on the bottom of the chart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtop.runner.commands.common import Report
from kvtop.runner.commands.load_output import meets
from kvtop.runner.units import fmt_rate

ROOF_SCALE = 3.0  # the roof is drawn when at most this many times the curve's top, as the decode chart's ceiling


@dataclass
class LoadChartPlan:
    xs: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)
    per_user: list[float] = field(default_factory=list)
    roof: list[float] = field(default_factory=list)  # empty when any level has no roof, or it is off the scale
    roof_above: str | None = None  # the roof, named when it is too far above the curve to draw
    knee: float | None = None  # the level (x) the targets hold up to
    y_top: float = 1.0
    x_label: str = "users"
    flagged: list[bool] = field(default_factory=list)  # each level: its rate is not explained (load_checks.py)


def level_rows(rows: list[Report]) -> list[Report]:
    """One row per level: a fleet's "all" rows, else the single server's."""
    alls = [r for r in rows if r["server"] == "all"]
    return alls or rows


def ceiling(r: Report) -> float | None:
    """The level's roof: the batched bandwidth roof or the compute roof, the lower, as
    the server pane's batched ceiling is (a trial saw 261 tok/s here beside the server
    pane's compute-bound 132 for the same 2 users)."""
    b, c = r.get("batched_roof_tok_s"), r.get("compute_roof_tok_s")
    return float(min(b, c)) if b and c else float(b) if b else None


def plan_load_chart(rows: list[Report], slo_ttft: float | None, slo_tok_s: float | None) -> LoadChartPlan:
    plan = LoadChartPlan()
    pts = [r for r in level_rows(rows) if r["gen_tok_s"] is not None]
    if not pts:
        return plan
    plan.x_label = "users" if pts[0]["users"] is not None else "arrivals per second"
    plan.xs = [float(r["users"] if r["users"] is not None else r["rate"]) for r in pts]
    plan.measured = [r["gen_tok_s"] for r in pts]
    plan.per_user = [r["per_user_gen_tok_s"] or 0.0 for r in pts]
    plan.flagged = [bool(r.get("unexplained")) for r in pts]
    roof = [ceiling(r) for r in pts]
    top = max(plan.measured + plan.per_user + [1e-9])
    known = [x for x in roof if x is not None]
    if len(known) == len(roof) and max(known) <= ROOF_SCALE * top:
        plan.roof = known
    elif len(known) == len(roof):  # a roof 20x above (a busy CPU, a bandwidth given for another machine)
        # would squash the curve onto the bottom row: the legend names it instead
        plan.roof_above = f"roof up to {fmt_rate(max(known))}, {max(known) / top:.0f}x the top rate: above the chart"
    if slo_ttft is not None or slo_tok_s is not None:
        ok = [x for x, r in zip(plan.xs, pts) if meets(r, slo_ttft, slo_tok_s)]
        plan.knee = max(ok) if ok else None
    plan.y_top = max(plan.measured + plan.per_user + plan.roof + [1.0]) * 1.1
    return plan
