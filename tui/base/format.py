"""Number formatting and text bars shared by the panes (pure functions).

The number formatters live in ``runner.units`` (shared with the headless commands);
this module adds what needs Textual.
"""

from __future__ import annotations

from textual.content import Content

# one set of formatters for the panes and the headless commands; the panes' bytes to three
# significant digits, one form in every pane ("300 MiB" in Memory as in Estimate)
from kvtop.runner.units import NA, fmt_int, fmt_rate, fmt_ratio, fmt_seconds  # noqa: F401
from kvtop.runner.units import fmt_size as fmt_bytes  # noqa: F401
from kvtop.tui.base.flow import flow, joined


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
    pane. With no width yet (-1, 0) everything is one line. Phrases (``gap`` a space)
    that ``flow`` would keep together stay together ("each verify pass of 49" above
    "costs" read as a pass of 49 of something), and an item wider than the line is
    flowed (tui/base/flow.py), never left to Textual's wrap."""
    contents = [item if isinstance(item, Content) else Content(item) for item in items]
    if gap == " ":
        contents = _joined_phrases(contents)
    lines: list[Content] = []
    line: Content | None = None
    for item in contents:
        if width > 0 and item.cell_length > width:
            *whole, line_end = flow(item, width)
            lines += ([line] if line is not None else []) + whole
            line = line_end
        elif line is None:
            line = item
        elif width > 0 and line.cell_length + len(gap) + item.cell_length > width:
            lines.append(line)
            line = item
        else:
            line = Content.assemble(line, gap, item)
    if line is not None:
        lines.append(line)
    return lines


def _joined_phrases(items: list[Content]) -> list[Content]:
    """Phrases joined where the words either side of the gap must not part (flow.joined)."""
    out: list[Content] = []
    for item in items:
        prev = out[-1].plain.split() if out else []
        words = item.plain.split()
        if prev and words and joined(prev[-1], words[0], len(words) == 1):
            out[-1] = Content.assemble(out[-1], " ", item)
        else:
            out.append(item)
    return out


# a TTFT segment's colour, the same in the F2 waterfall and the prefill pane's compact one
SEGMENT_STYLES = ["$kvtop-kv-full", "$kvtop-kv-sliding", "$kvtop-kv-latent", "$kvtop-kv-recurrent",
                  "$kvtop-reused", "$kvtop-warn"]


def segment_style(label: str, i: int) -> str:
    if label.startswith(("ubatch", "prefill")):
        return "$kvtop-measured"
    if label.startswith("wait"):
        return "$kvtop-critical"
    return SEGMENT_STYLES[i % len(SEGMENT_STYLES)]
