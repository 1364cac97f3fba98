"""Number formatting and text bars shared by the panes (pure functions).

The number formatters live in ``runner.units`` (shared with the headless commands);
this module adds what needs Textual.
"""

from __future__ import annotations

from textual.content import Content

# one set of formatters for the panes and the headless commands
from kvtop.runner.units import NA, fmt_bytes, fmt_int, fmt_rate, fmt_ratio, fmt_seconds  # noqa: F401


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


def pack(items: list, width: int, gap: str = "  ") -> list[Content]:
    """Items (Content or str) on as few lines as fit ``width`` cells, a line broken only
    between items: word-wrapping split "16.4 tok/s" into "16.4" and "tok/s" in a narrow
    pane. With no width yet (-1, 0) everything is one line."""
    lines: list[Content] = []
    line: Content | None = None
    for item in items:
        item = item if isinstance(item, Content) else Content(item)
        if line is None:
            line = item
        elif width > 0 and line.cell_length + len(gap) + item.cell_length > width:
            lines.append(line)
            line = item
        else:
            line = Content.assemble(line, gap, item)
    if line is not None:
        lines.append(line)
    return lines


# a TTFT segment's colour, the same in the F2 waterfall and the prefill pane's compact one
SEGMENT_STYLES = ["$kvtop-kv-full", "$kvtop-kv-sliding", "$kvtop-kv-latent", "$kvtop-kv-recurrent",
                  "$kvtop-reused", "$kvtop-warn"]


def segment_style(label: str, i: int) -> str:
    if label.startswith(("ubatch", "prefill")):
        return "$kvtop-measured"
    if label.startswith("wait"):
        return "$kvtop-critical"
    return SEGMENT_STYLES[i % len(SEGMENT_STYLES)]
