"""Number formatting and text bars shared by the panes (pure functions)."""

from __future__ import annotations

from textual.content import Content

NA = "N/A"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return NA
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return NA


def fmt_rate(x: float | None, unit: str = "tok/s") -> str:
    if x is None:
        return NA
    if x >= 100:
        return f"{x:,.0f} {unit}"
    return f"{x:.1f} {unit}"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return NA
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.2f} s"
    m, sec = divmod(s, 60)
    return f"{int(m)}m{sec:04.1f}s"


def fmt_ratio(measured: float | None, predicted: float | None) -> str:
    if measured is None or not predicted:
        return NA
    return f"{measured / predicted:.2f}x"


def fmt_int(n: int | None) -> str:
    return NA if n is None else f"{n:,}"


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
