"""Estimate vs actual: what the physics predicts beside what was measured, and why they differ.

The rows are built by ``runner.physics.estimate_rows.estimate_rows`` and the verdict
line by ``runner.physics.verdicts.estimate_verdict``; this pane only draws them.
"""

from __future__ import annotations

from textual.content import Content

from runner.physics.estimate_rows import EstimateRows
from runner.physics.verdicts import estimate_verdict

from ..format import NA, fmt_bytes, fmt_rate, fmt_seconds
from .base import PaneWidget

# (key, label, format, lower is better)
SPEC = [
    ("ttft", "TTFT", fmt_seconds, True),
    ("prefill", "prefill", fmt_rate, False),
    ("decode", "decode", fmt_rate, False),
    ("kv", "KV bytes", fmt_bytes, False),
    ("weights", "weights", fmt_bytes, False),
    ("peak", "peak mem", fmt_bytes, False),
]


class EstimatePane(PaneWidget):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.border_title = "Estimate vs actual"
        self.rows = EstimateRows()

    @property
    def note(self) -> str:
        return self.rows.note

    def set_rows(self, rows: EstimateRows) -> None:
        """``rows`` from ``runner.physics.estimate_rows.estimate_rows``."""
        self.rows = rows
        self.refresh(layout=True)

    def render(self) -> Content:
        w_label, w_col = 9, 12
        lines = [Content.assemble((f"{'':<{w_label}}", ""), (f"{'predicted':>{w_col}}", "$text-muted"),
                                  (f"{'measured':>{w_col}}", "$text-muted"), (f"{'ratio':>8}", "$text-muted"))]
        for key, label, fmt, lower_is_better in SPEC:
            row = self.rows.row(key)
            ratio = row.ratio
            if ratio is None:
                style, rtxt = "$text-muted", NA
            else:
                good = ratio <= 1.25 if lower_is_better else ratio >= 0.8
                ok = ratio <= 2 if lower_is_better else ratio >= 0.4
                style = "$kvtop-ok" if good else "$kvtop-warn" if ok else "$kvtop-critical"
                rtxt = f"{ratio:.2f}x"
            lines.append(Content.assemble(f"{label:<{w_label}}", f"{fmt(row.predicted):>{w_col}}",
                                          (f"{fmt(row.measured):>{w_col}}", "$kvtop-measured"), (f"{rtxt:>8}", style)))
        lines.append(Content.styled(estimate_verdict(self.rows), "italic"))
        if self.note:
            lines.append(Content.styled(self.note, "$text-muted"))
        return Content("\n").join(lines)
