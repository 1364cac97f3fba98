"""How each request of ``kvtop load`` ended: one named outcome, and the reason in one line.

- completed: the server sent its stop event and the reply has the tokens asked for
  (``-n``, with ``ignore_eos`` a reply never stops early on its own);
- truncated: the stream ended (or broke off) before that, with how many tokens it had;
- refused: the server answered an HTTP error (its status and message: 503 "Loading
  model", 429, 500);
- timed out: a deadline passed (which one: the answer's start, an event, the gap);
- unreachable: no connection could be made (refused, no route, unknown host);
- cancelled: stopped by the user (Ctrl+C, Esc, a signal) or by kvtop ending the run.

Only completed requests enter the percentiles and rates; the others are counted by
outcome in every row and their most common reasons printed under the table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kvtop.runner.sanitize import clean_line
from kvtop.runner.server.urls import ServerError
from kvtop.runner.units import fmt_int

if TYPE_CHECKING:
    from kvtop.runner.server.load_driver import RequestResult

COMPLETED, TRUNCATED, REFUSED, TIMED_OUT, UNREACHABLE, CANCELLED = (
    "completed", "truncated", "refused", "timed_out", "unreachable", "cancelled")
OUTCOMES = (COMPLETED, TRUNCATED, REFUSED, TIMED_OUT, UNREACHABLE, CANCELLED)
NOT_COMPLETED = OUTCOMES[1:-1]  # what a row counts as failed (a cancel is not a failure)
WORDS = {TIMED_OUT: "timed out"}  # the name a person reads


def is_stop(ev: dict[str, Any], endpoint: str) -> bool:
    """The event that ends a reply: ``stop: true`` (/completion) or a ``finish_reason`` (chat)."""
    if endpoint == "completion":
        return ev.get("stop") is True
    choices = ev.get("choices")
    return isinstance(choices, list) and bool(choices) and isinstance(choices[0], dict) \
        and bool(choices[0].get("finish_reason"))


def of_stream(path: str, stopped: bool, tokens: int, n_predict: int, exact: bool = True) -> tuple[str, str | None]:
    """A stream that ended without an error: completed, or truncated and why. ``exact``:
    ``tokens`` is the server's own count (its timings); without them the events' count
    may fall short of the tokens (a character split over two has an empty event), so
    the stop event alone says the reply ended as asked."""
    if stopped and (tokens >= n_predict or not exact):
        return COMPLETED, None
    how = "with its stop event" if stopped else "without a stop event"
    return TRUNCATED, f"{path}: the reply ended {how} after {fmt_int(tokens)} of {fmt_int(n_predict)} tokens"


def of_error(exc: ServerError, tokens: int) -> tuple[str, str]:
    """A stream that raised: refused (an HTTP status), timed out, unreachable, or truncated."""
    text = clean_line(str(exc), 200)
    if exc.status is not None and exc.status >= 300:
        return REFUSED, text
    if exc.kind == "timeout":
        return TIMED_OUT, text
    if exc.kind == "connect":
        return UNREACHABLE, text
    return TRUNCATED, f"{text} ({fmt_int(tokens)} tokens received)"


def counts(results: Iterable[RequestResult]) -> dict[str, int]:
    c = Counter(r.kind for r in results)
    return {k: c.get(k, 0) for k in OUTCOMES}


def reasons(results: Sequence[RequestResult], top: int = 3) -> list[str]:
    """The most common outcomes other than completed and cancelled, each with its count
    and the first reason of that kind quoted: ``2 truncated (first: "...")``."""
    bad = [r for r in results if r.kind in NOT_COMPLETED]
    out = []
    for kind, n in Counter(r.kind for r in bad).most_common(top):
        first = next((r.error for r in bad if r.kind == kind and r.error), None)
        out.append(f"{n} {WORDS.get(kind, kind)}" + (f' (first: "{first}")' if first else ""))
    return out
