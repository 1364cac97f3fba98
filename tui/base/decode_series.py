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

The rate is measured over **passes**, not tokens. A speculative verify pass (or a
server's SSE read) hands over its k tokens at once: the engine stamps them with one
time; tokens closer than ``BURST_GAP_S`` are one pass, and so are an older trace's,
stamped 0.01-9 ms apart (below). A point's window is the last ``RATE_WINDOW`` passes before it (for a plain
decode, 8 tokens as before): its tokens over the time from the pass before the window
to the last one. Every token of a pass gets the pass's rate, so a burst is drawn as a
step k positions wide, not collapsed. Counted per token, a window of 8 tokens inside a
47-token burst spanned microseconds and read 900 tok/s (the axis went to 1,000 and the
338 tok/s ceiling lay on its 0 row), or no point was made for the burst at all (the
chart's x axis spanned 164-165 after a pass that gave 47 tokens).
"""

from __future__ import annotations

from collections import deque
from itertools import islice

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
# A pass's tokens: gaps under BURST_GAP_S are one pass (the engine stamps a pass's tokens
# with one time; a server's SSE reads bunch them). A trace from before that spread them:
# the second 0.2-9 ms after the first, the rest microseconds apart. A gap under
# BURST_SHARE of the median gap followed by one under BURST_GAP_S (but not 0) is one
# pass too. Taken as one pass by the gap alone, a busy machine's plain steps after a
# verify pass (the median gap then a verify pass's) were joined to it.
BURST_GAP_S = 0.001
BURST_SHARE = 0.25
MIN_SPAN_S = 0.05  # a window reaches back until it spans this long (or holds every pass kept)
PASSES_KEPT = 256
# A long wait before a pass of more than one token is the pass computing, not a stall:
# taken for a stall when it comes, it is taken back when the pass's next token follows.
# A wait no longer than VERIFY_SLACK times the recent verify passes' is one more verify
# pass (one that kept no draft and gave one token), not a stall either.
VERIFY_SLACK = 1.5
VERIFY_KEPT = 8
# Such a pass is recorded as (KV position of its first token, its tokens) for the
# chart's marks (the chart marks passes only of an engine that speculates).
MAX_PASSES = 4096

Pass = tuple[float, int]  # (the time its tokens came, its tokens)


class DecodeSeries:
    def __init__(self) -> None:
        self.count = 0  # tokens seen
        self.points: list[tuple[int, float]] = []  # (KV position, tok/s), one a token
        self.stalls: list[tuple[int, float]] = []  # (KV position after the pause, seconds)
        self.passes: list[tuple[int, int]] = []  # (KV position of a pass's first token, its tokens), tokens > 1
        self._run: deque[Pass] = deque(maxlen=PASSES_KEPT)  # this run's passes (since the last stall)
        self._gaps: deque[float] = deque(maxlen=GAP_HISTORY)  # recent gaps between passes, stalls left out
        self._verify: deque[float] = deque(maxlen=VERIFY_KEPT)  # the waits before recent passes of > 1 token
        self._slow: list[tuple[float, Pass]] = []  # the long gaps in a row so far: (gap, the pass before it)
        self._last_t: float | None = None
        self._pass_pos: list[int] = []  # the current pass's tokens' KV positions
        self._pass_gap = 0.0  # the wait before the current pass
        self._pointed = 0  # how many of them have points (the last of ``points``)
        self._undo: tuple[list[Pass], int] | None = None  # the last stall's (run before it, its index)
        self._redo: tuple[tuple, tuple[int, float]] | None = None  # the state before a token a small gap after one

    def add(self, pos: int, t: float) -> None:
        """A token at KV position ``pos``, decoded at ``t`` (seconds)."""
        redo, self._redo = self._redo, None
        gap = t - self._last_t if self._last_t is not None else 0.0
        if redo is not None and 0 < gap < BURST_GAP_S:
            # spread tokens of one pass (an older trace's): the one before was its second, its
            # gap (0.2-9 ms) the time the first took to be handed over: taken again, as joining it
            state, (before_pos, before_t) = redo
            self._restore(state)
            self._add(before_pos, before_t, join=True)
        elif self._run and gap >= BURST_GAP_S and self._small(gap):
            self._redo = (self._state(), (pos, t))
        self._add(pos, t)

    def _state(self) -> tuple:
        return (self.count, list(self.points), list(self.stalls), list(self.passes), deque(self._run, PASSES_KEPT),
                deque(self._gaps, GAP_HISTORY), deque(self._verify, VERIFY_KEPT), list(self._slow), self._last_t,
                list(self._pass_pos), self._pass_gap, self._pointed, self._undo)

    def _restore(self, state: tuple) -> None:
        (self.count, self.points, self.stalls, self.passes, self._run, self._gaps, self._verify, self._slow,
         self._last_t, self._pass_pos, self._pass_gap, self._pointed, self._undo) = state

    def _small(self, gap: float) -> bool:
        """Under ``BURST_SHARE`` of the median gap: it may be a pass's spread tokens (taken so
        only when the next token comes within ``BURST_GAP_S``, but not at the same time: a
        pass the engine stamped is its own pass, however short its wait)."""
        gaps = self._gaps
        return len(gaps) >= MIN_GAPS and gap < BURST_SHARE * sorted(gaps)[len(gaps) // 2]

    def _add(self, pos: int, t: float, join: bool = False) -> None:
        self.count += 1
        run, last, self._last_t = self._run, self._last_t, t
        undo, self._undo = self._undo, None
        gap = t - last if last is not None else 0.0
        if last is not None and run and (join or gap < BURST_GAP_S):
            if undo is not None:  # the wait before this pass was the pass computing, not a stall
                before, at = undo
                del self.stalls[at:]
                if self._slow:
                    self._slow.pop()
                first = run[-1]
                run.clear()
                run.extend(before)
                run.append(first)
            run[-1] = (t, run[-1][1] + 1)
            self._pass_pos.append(pos)
            self._note_pass()
        else:
            if last is not None:
                self._judge(gap, pos)
            run.append((t, 1))
            self._pass_pos, self._pass_gap, self._pointed = [pos], gap, 0
        self._point()

    def _judge(self, gap: float, pos: int) -> None:
        """The gap before a new pass: a pace, a stall, or the pace changing."""
        run = self._run
        if not self._is_stall(gap):
            self._slow.clear()
            self._gaps.append(gap)
        elif len(self._slow) + 1 < SLOW_RUN:
            self._slow.append((gap, run[-1]))
            self._undo = (list(run), len(self.stalls))
            self.stalls.append((pos, gap))
            run.clear()  # the rate is measured again from this token on
        else:  # the new pace: its gaps are measured, the stalls it was taken for taken back
            self._slow.append((gap, run[-1]))
            del self.stalls[len(self.stalls) - (len(self._slow) - 1):]
            run.clear()
            run.extend(p for _, p in self._slow)
            self._gaps.clear()
            self._gaps.extend(g for g, _ in self._slow)
            self._slow.clear()

    def _note_pass(self) -> None:
        first, n = self._pass_pos[0], len(self._pass_pos)
        if n == 2:
            self.passes.append((first, n))
            self._verify.append(self._pass_gap)
            if len(self.passes) > MAX_PASSES:
                del self.passes[: len(self.passes) - MAX_PASSES]
        else:
            self.passes[-1] = (first, n)

    def _point(self) -> None:
        """The current pass's tokens, each at the rate of the window that ends with it."""
        rate = self._window_rate()
        if rate is None:
            return
        points = self.points
        n = min(self._pointed, len(points))
        for i in range(len(points) - n, len(points)):
            points[i] = (points[i][0], rate)
        points.extend((p, rate) for p in self._pass_pos[self._pointed:])
        self._pointed = len(self._pass_pos)
        if len(points) > MAX_POINTS:
            del points[: len(points) - MAX_POINTS]

    def _window_rate(self) -> float | None:
        run = self._run
        n = len(run)
        if n < 2:
            return None
        end = run[-1][0]
        j = max(1, n - RATE_WINDOW)  # the window's first pass: it is timed from the pass before it
        while j > 1 and end - run[j - 1][0] < MIN_SPAN_S:
            j -= 1
        span = end - run[j - 1][0]
        tokens = sum(k for _, k in islice(run, j, n))
        return tokens / span if tokens >= MIN_WINDOW and span > 0 else None

    def _is_stall(self, gap: float) -> bool:
        gaps = self._gaps
        if len(gaps) < MIN_GAPS or gap <= STALL_MIN_S:
            return False
        if self._verify and gap <= VERIFY_SLACK * max(self._verify):
            return False  # as long as a verify pass: one that gave a single token
        ordered = sorted(gaps)
        return gap > STALL_GAPS * ordered[len(ordered) // 2]

    @property
    def rate(self) -> float | None:
        """The latest point's tok/s (None before ``MIN_WINDOW`` + 1 tokens)."""
        return self.points[-1][1] if self.points else None
