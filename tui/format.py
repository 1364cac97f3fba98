"""Number formatting and text bars shared by the panes (pure functions).

The number formatters live in ``runner.units`` (shared with the headless commands);
this module adds what needs Textual.
"""

from __future__ import annotations

from textual.content import Content

# one set of formatters for the panes and the headless commands
from runner.units import NA, fmt_bytes, fmt_int, fmt_rate, fmt_ratio, fmt_seconds  # noqa: F401


def bar(width: int, parts: list[tuple[float, str]], empty_style: str = "$kvtop-bar-empty") -> Content:
    """A horizontal bar of ``width`` cells: each part (fraction, style) filled in turn.

    Fractions are of the whole bar; rounding never lets the parts exceed it.
    """
    width = max(0, width)
    cells: list[tuple[str, str]] = []
    used = 0
    acc = 0.0
    for frac, style in parts:
        acc += max(0.0, frac)
        end = min(width, int(round(min(acc, 1.0) * width)))
        n = end - used
        if n > 0:
            cells.append(("█" * n, style))
            used = end
    if width - used > 0:
        cells.append(("░" * (width - used), empty_style))
    return Content.assemble(*cells)
