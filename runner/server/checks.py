"""The numbers a llama-server sends, checked where they enter kvtop.

A server (or a proxy in front of it) can answer anything: a slot holding
-1,000,000,000 tokens, ``n_ctx`` 1e15 (83 million TiB of KV in the physics),
``requests_deferred`` -3, 1.7e308, NaN (Python's JSON decoder reads ``NaN`` and
``Infinity``). Each was drawn as it came. Here a value is a count only when it is a
finite whole number within what any machine holds; anything else is refused with one
line naming the field and its value, and the caller shows that line instead of the
number: never drawn, never used in the physics.
"""

from __future__ import annotations

import math

# llama.cpp keeps positions in an int32, and no model trains beyond ~10M tokens: 2**27
# (134M) tokens in one slot is beyond any machine's memory for any model's KV.
MAX_CTX = 2**27
MAX_SLOTS = 2**20  # -np beyond a million slots: no server runs it
MAX_TOTAL_TOKENS = 10**15  # tokens since the server started: 30 years at a million tok/s
MAX_REQUESTS = 10**6  # requests processing or deferred at once
MAX_TASK_ID = 2**62  # id_task: one counter per server process (-1 when idle)


class Refused(ValueError):
    """A value that is not what it claims to be: its message is the one line to show."""


def _shown(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return type(v).__name__
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return f"{int(v):,}" if v.is_integer() and abs(v) < 1e16 else f"{v:g}"


def count(v: object, what: str, hi: int, lo: int = 0) -> int:
    """``v`` as a whole number in ``lo..hi``, or ``Refused`` naming ``what``."""
    if type(v) is int and lo <= v <= hi:  # noqa: E721 (the fast path: bool is not a count)
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer() and lo <= v <= hi:
        return int(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Refused(f"{what} is a {_shown(v)}, not a number")
    if isinstance(v, float) and math.isnan(v):
        raise Refused(f"{what} is NaN")
    if v < lo:
        raise Refused(f"{what} {_shown(v)} is negative" if lo == 0 else f"{what} {_shown(v)} is below {lo:,}")
    if v > hi:
        raise Refused(f"{what} {_shown(v)} is more than any machine holds")
    raise Refused(f"{what} {_shown(v)} is not a whole number")
