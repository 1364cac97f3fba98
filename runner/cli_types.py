"""Argparse types for every numeric flag of every kvtop command.

A number that is not finite or not in its range is a usage error (exit 2) that names
the range, never a value silently replaced by another: ``-c -5`` used to become the
model's trained context, ``--refresh 0.1`` became 0.25, ``--bandwidth-gbs -1``
printed a negative ceiling and ``nan`` printed ``nan``.

    p.add_argument("-c", type=int_in(0, INT32_MAX), ...)
    p.add_argument("--tflops", type=positive_float, ...)

argparse reports ``argument -c/--ctx-size: must be an integer from 0 to 2,147,483,647
(got -5)`` and exits 2.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from kvtop.runner.pacing import MAX_S, MIN_S

# llama.cpp takes its counts as C ints (ctypes would silently wrap a larger one).
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


def _num(x: float) -> str:
    """A bound as a person writes it: ``0.25``, ``10``, ``2,147,483,647``."""
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _range_text(lo: float | None, hi: float | None, lo_open: bool, kind: str) -> str:
    if lo is not None and hi is not None:
        return f"{kind} from {_num(lo)} to {_num(hi)}" if not lo_open else \
            f"{kind} above {_num(lo)} and at most {_num(hi)}"
    if lo is not None:
        return f"{kind} above {_num(lo)}" if lo_open else f"{kind} of at least {_num(lo)}"
    if hi is not None:
        return f"{kind} of at most {_num(hi)}"
    return f"finite {kind}"


def int_in(lo: int | None = None, hi: int | None = INT32_MAX, *, name: str = "") -> Callable[[str], int]:
    """An integer in ``[lo, hi]`` (a bound of None is open)."""
    want = _range_text(lo, hi, False, "an integer")

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want} (got {text!r})") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {want} (got {text})")
        return value

    parse.__name__ = name or "integer"
    return parse


def float_in(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
             name: str = "") -> Callable[[str], float]:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``; a bound of None is open)."""
    want = _range_text(lo, hi, lo_open, "a number")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want} (got {text!r})") from None
        bad = not math.isfinite(value)
        if lo is not None:
            bad = bad or (value <= lo if lo_open else value < lo)
        if hi is not None:
            bad = bad or value > hi
        if bad:
            raise argparse.ArgumentTypeError(f"must be {want} (got {text})")
        return value

    parse.__name__ = name or "number"
    return parse


# Shared by several commands
positive_float = float_in(0.0, None, lo_open=True, name="positive number")
non_negative_int = int_in(0, INT32_MAX, name="count")
positive_int = int_in(1, INT32_MAX, name="positive count")
# ``kvtop --refresh SECONDS``: token events arrive in pacing.BATCH_S batches, so a faster
# redraw shows nothing new; slower than MAX_S and the dashboard looks frozen.
refresh_seconds = float_in(MIN_S, MAX_S, name="seconds")
# ``kvtop --ui-nice N``: os.nice() increments; 19 is the lowest priority there is.
nice_increment = int_in(0, 19, name="nice increment")
# ``kvtop replay --speed X``
replay_speed = float_in(0.0, 1e6, lo_open=True, name="speed")
