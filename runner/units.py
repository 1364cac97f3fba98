"""Byte units and the number formats every command and pane shares (pure, no UI imports).

One spelling for "cannot be known": ``NA`` ("N/A"), in the panes and in ``kvtop
estimate`` alike. A value that is not a finite number (NaN, inf) is shown as ``NA``
too: it can only come from a broken input, and printing "nan" hides that.
"""

from __future__ import annotations

import math

KIB = 1024
MIB = 1024**2
GIB = 1024**3

NA = "N/A"
N_CTX_PAD = 256  # llama.cpp pads n_ctx (and a sliding window's cells) to a multiple of this


def pad(n: int, to: int = N_CTX_PAD) -> int:
    """``n`` rounded up to a multiple of ``to``."""
    return (n + to - 1) // to * to


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_bytes(n: float | None) -> str:
    """Bytes in binary units: ``512 B``, ``22.50 KiB``, ``1,024.00 TiB``; ``N/A`` when unknown."""
    if n is None or not _finite(n):
        return NA
    n = float(n)
    for unit in _BYTE_UNITS:
        if abs(n) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{n:,.0f} B" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1024
    return NA  # pragma: no cover - the loop always returns


def fmt_size(n: float | None) -> str:
    """Bytes in binary units to three significant digits: ``512 B``, ``22.5 KiB``,
    ``92.1 MiB``, ``281 MiB``, ``1.45 GiB`` (the panes' one form: the Memory pane read
    "300.00 MiB" beside the Estimate pane's "300 MiB"); ``N/A`` when unknown."""
    text = fmt_bytes(n)
    if text == NA or text.endswith(" B"):
        return text
    num, unit = text.split(" ", 1)
    x = float(num.replace(",", ""))
    return f"{x:,.0f} {unit}" if x >= 100 else f"{x:.1f} {unit}" if x >= 10 else f"{x:.2f} {unit}"


def fmt_int(n: int | None) -> str:
    """An integer with thousands separators (``4,096``); ``N/A`` when unknown."""
    if n is None or not _finite(n):
        return NA
    return f"{int(n):,}"


def fmt_num(x: float | None, spec: str = ",.1f", unit: str = "") -> str:
    """A number in ``spec`` followed by ``unit`` (``30.0 GB/s``); ``N/A`` when unknown."""
    if x is None or not _finite(x):
        return NA
    return f"{x:{spec}}{unit}"


def fmt_rate(x: float | None, unit: str = "tok/s") -> str:
    """``150 tok/s`` from 100 up, ``12.5 tok/s`` below; ``N/A`` when unknown."""
    if x is None or not _finite(x):
        return NA
    if x >= 100:
        return f"{x:,.0f} {unit}"
    return f"{x:.1f} {unit}"


def fmt_seconds(s: float | None) -> str:
    """``98 ms`` under a second, ``2.30 s`` under a minute, then ``1m02.0s``; ``N/A`` when unknown."""
    if s is None or not _finite(s):
        return NA
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.2f} s"
    m, sec = divmod(s, 60)
    return f"{int(m)}m{sec:04.1f}s"


def fmt_ratio(measured: float | None, predicted: float | None) -> str:
    """``0.45x``: measured over predicted; ``N/A`` when either is unknown (or predicted is 0)."""
    if measured is None or not predicted or not _finite(measured) or not _finite(predicted):
        return NA
    return f"{measured / predicted:.2f}x"


def mib_to_bytes(mib: float | None) -> int | None:
    """llama.cpp logs its buffers in MiB; kvtop compares bytes."""
    if mib is None or not _finite(mib):
        return None
    return round(mib * MIB)


def nice_ticks(lo: float, hi: float, most: int, whole: bool = True) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) from ``lo`` to ``hi``:
    the closest spacing that gives at most ``most`` ticks; ``whole``: never under 1 apart."""
    if hi <= lo:
        return [float(lo)]
    base = 10 ** math.floor(math.log10((hi - lo) / max(1, most)))
    before: tuple[float, float, int] | None = None  # the last spacing that gave too many
    for step in (m * base for m in (1, 2, 5, 10, 20, 50, 100)):
        if whole and step < 1:
            continue
        first = math.ceil(lo / step - 1e-9) * step
        n = int(math.floor((hi - first) / step + 1e-9)) + 1
        if n <= most:
            break
        before = (first, step, n)
    if n < 2 <= most and before is not None:
        # one tick left (0 to 45 in 2: 20 apart gives 3, 50 apart only 0): the closer
        # spacing's first and last, so a short chart keeps a label above its 0
        b_first, b_step, b_n = before
        return [b_first, b_first + (b_n - 1) * b_step]
    return [first + i * step for i in range(max(n, 1))]


def tick_labels(ticks: list[float]) -> list[str]:
    """The ticks' labels: whole numbers with separators, else as many decimals as the step needs."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    if step >= 1:
        return [fmt_int(round(t)) for t in ticks]
    decimals = max(1, -math.floor(math.log10(step)))
    return [f"{t:.{decimals}f}" for t in ticks]
