"""tok/s per KV position for the decode chart, with stalls cut out of it (pure).

Each token's rate is measured over the last ``RATE_WINDOW`` token gaps. A pause in
the token stream (a swap-in, another process taking the cores, a laptop waking) is a
**stall** when it is longer than ``STALL_GAPS`` median gaps of the tokens before it
and than ``STALL_MIN_S``: it is recorded as (KV position after it, seconds), and the
rate window starts again after it. Without the cut, every window that spans the
pause reads it as per-token cost and the line drops to near 0 tok/s for
``RATE_WINDOW`` tokens; the chart draws a stall as a break and a marker instead.
``SLOW_RUN`` long gaps in a row are no pause: the decode itself slowed (another
process took the cores), so they are measured as the new pace and the stalls they
were first taken for are taken back. Without that, every later gap of a slowed turn
was a "stall", no point was made again, and the live rate stayed at its last fast
value (seen: "31.7 tok/s live" for 33 s while 12 tokens came).
"""

from __future__ import annotations

from collections import deque

RATE_WINDOW = 8  # token gaps over which a point's tok/s is measured
MIN_WINDOW = 3  # gaps a point needs: a turn's first gap holds the first decode's one-off
# cost (a graph for one token), and one or two gaps are noise: the line started far
# below the rate for its first tokens
MAX_POINTS = 4096  # points kept per turn (the chart buckets them to its width)
STALL_GAPS = 5  # a gap over this many median gaps...
STALL_MIN_S = 0.1  # ...and over this many seconds is a stall
GAP_HISTORY = 16  # gaps the median is taken over
MIN_GAPS = 4  # gaps needed before anything is called a stall
SLOW_RUN = 3  # this many long gaps in a row are not a pause but the new pace (a busy CPU)
# A speculative verify pass (or a server's SSE read) hands over several tokens at once,
# microseconds apart: 8 gaps inside one pass read as 250,000 tok/s, and the pause before
# the next pass as a stall. Gaps under BURST_GAP_S are no gap for the stall rule, and a
# point's window reaches back until it spans at least MIN_SPAN_S (or holds TIMES_KEPT).
# A long pass (49 tokens, compute-bound) is a long wait before its burst: taken for a
# stall when it comes, it is taken back when the burst follows, and the burst's points
# are measured across it (the turn's chart ended at the pass, its 27 tokens no points).
BURST_GAP_S = 0.001
MIN_SPAN_S = 0.05
TIMES_KEPT = 256
# Such a run of tokens is one verify pass that made more than one token: recorded as
# (KV position of its first token, its tokens) for the chart's marks (a llama-server's
# SSE reads bunch tokens too: the chart marks passes only of an engine that speculates).
MAX_PASSES = 4096


class DecodeSeries:
    def __init__(self) -> None:
        self.count = 0  # tokens seen
        self.points: list[tuple[int, float]] = []  # (KV position, tok/s)
        self.stalls: list[tuple[int, float]] = []  # (KV position after the pause, seconds)
        self._times: deque[float] = deque(maxlen=TIMES_KEPT)  # this run's last token times
        self._gaps: deque[float] = deque(maxlen=GAP_HISTORY)  # recent gaps, stalls left out
        self._slow: list[tuple[float, float]] = []  # the long gaps in a row so far: (gap, time before it)
        self.passes: list[tuple[int, int]] = []  # (KV position of a burst's first token, its tokens)
        self._last: tuple[int, float] | None = None  # the previous token's (position, time)
        self._in_burst = False
        self._undo: tuple[list[float], int] | None = None  # the last stall's (times before it, its index)

    def add(self, pos: int, t: float) -> None:
        """A token at KV position ``pos``, decoded at ``t`` (seconds)."""
        times = self._times
        self.count += 1
        self._note_pass(pos, t)
        if times:
            gap = t - times[-1]
            undo, self._undo = self._undo, None
            if gap < BURST_GAP_S:  # one pass's tokens: no gap to judge a pause by
                if undo is not None:  # the pause before them was the pass computing them, not a stall
                    before, at = undo
                    del self.stalls[at:]
                    if self._slow:
                        self._slow.pop()
                    first = times[-1]
                    times.clear()
                    times.extend(before)
                    times.append(first)
            elif not self._is_stall(gap):
                self._slow.clear()
                self._gaps.append(gap)
            elif len(self._slow) + 1 < SLOW_RUN:
                self._slow.append((gap, times[-1]))
                self._undo = (list(times), len(self.stalls))
                self.stalls.append((pos, gap))
                times.clear()  # the rate is measured again from this token on
            else:  # the new pace: its gaps are measured, the stalls it was taken for taken back
                self._slow.append((gap, times[-1]))
                del self.stalls[len(self.stalls) - (len(self._slow) - 1):]
                times.clear()
                times.extend(before for _, before in self._slow)
                self._gaps.clear()
                self._gaps.extend(g for g, _ in self._slow)
                self._slow.clear()
        times.append(t)
        first = max(0, len(times) - 1 - RATE_WINDOW)
        while first > 0 and times[-1] - times[first] < MIN_SPAN_S:
            first -= 1
        k = len(times) - 1 - first
        if k >= MIN_WINDOW and times[-1] - times[first] >= min(MIN_SPAN_S, BURST_GAP_S * k):
            self.points.append((pos, k / (times[-1] - times[first])))
            if len(self.points) > MAX_POINTS:
                del self.points[: len(self.points) - MAX_POINTS]

    def _note_pass(self, pos: int, t: float) -> None:
        last, self._last = self._last, (pos, t)
        burst = last is not None and t - last[1] < BURST_GAP_S
        if burst and self._in_burst:
            start, n = self.passes[-1]
            self.passes[-1] = (start, n + 1)
        elif burst and last is not None:
            self.passes.append((last[0], 2))
            if len(self.passes) > MAX_PASSES:
                del self.passes[: len(self.passes) - MAX_PASSES]
        self._in_burst = burst

    def _is_stall(self, gap: float) -> bool:
        gaps = self._gaps
        if len(gaps) < MIN_GAPS or gap <= STALL_MIN_S:
            return False
        ordered = sorted(gaps)
        return gap > STALL_GAPS * ordered[len(ordered) // 2]

    @property
    def rate(self) -> float | None:
        """The latest point's tok/s (None before ``MIN_WINDOW`` + 1 tokens)."""
        return self.points[-1][1] if self.points else None
