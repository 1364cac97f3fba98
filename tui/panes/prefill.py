"""Prefill progress: a bar with reused tokens already filled, rate and ETA.

It stays on screen after the turn with the final figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.content import Content

from kvtop.tui.base.format import bar, fmt_int, fmt_rate, fmt_seconds, segment_style
from kvtop.tui.panes.base import PaneWidget, fold
from kvtop.tui.panes.prefill_eta import forecast_eta, in_flight


def compact_waterfall(ttft: float, timeline, width: int) -> list[Content]:
    """The last turn's TTFT on one line, biggest segment first ("TTFT 1.86 s: ■ prefill
    99% ■ template 1%"), in F2's colours: a screenshot of the dashboard says where the
    first token's time went without opening F2. The micro-batches count as one
    "prefill"; segments under 1% are left out, and those that do not fit the line are
    counted ("+2 in F2"): a second and third line pushed the Estimate and Memory panes
    onto another page after every turn at 160x48."""
    merged: dict[str, tuple[float, str]] = {}
    ubatches = 0
    for i, (label, _start, dt) in enumerate(timeline):
        if label.startswith("ubatch"):
            ubatches += 1
            label = "prefill"
        seconds, style = merged.get(label, (0.0, segment_style(label, i)))
        merged[label] = (seconds + dt, style)
    items: list[tuple[Content, Content]] = []  # (as named, shorter: "prefill" without its micro-batches)
    for label, (seconds, style) in sorted(merged.items(), key=lambda kv: -kv[1][0]):
        share = seconds / ttft * 100
        if share < 1:
            continue
        name = f"prefill ({ubatches} ubatch{'es' if ubatches != 1 else ''})" if label == "prefill" and ubatches else label
        items.append(tuple(Content.assemble(("■ ", style), f"{n} ", (f"{share:.0f}%", "$text-muted"))
                           for n in (name, label)))
    line = Content.assemble(("TTFT ", "$text-muted"), (fmt_seconds(ttft), "bold"), ":")
    for i, (full, short) in enumerate(items):
        more = f" +{len(items) - i - 1} in F2" if i < len(items) - 1 else ""
        fits = [it for it in (full, short) if width <= 0 or line.cell_length + 1 + it.cell_length + len(more) <= width]
        if not fits and i == 0 and line.cell_length + 1 + short.cell_length <= width:
            fits = [short]  # the biggest segment, even with no room left to count the others
        if not fits:
            more = f" +{len(items) - i} in F2"
            return [Content.assemble(line, (more, "$text-muted")) if line.cell_length + len(more) <= width else line]
        line = Content.assemble(line, " ", fits[0])
    return [line]


class PrefillPane(PaneWidget):
    """While a prefill runs, elapsed and ETA move every ``tick_s`` on ``clock`` (a
    micro-batch of a long prompt can take seconds to report)."""

    def __init__(self, tick_s: float = 0.5, clock: Callable[[], float] = time.monotonic, **kw) -> None:
        super().__init__(**kw)
        self.tick_s, self.clock = tick_s, clock
        self._since: tuple[float, float] | None = None  # (clock, elapsed then) while a prefill runs
        self._ubatch = 0  # tokens of the last micro-batch reported
        self.forecast_s: float | None = None  # the turn's forecast of its prefill, shown until a report
        self.ubatch_size = 0  # the engine's micro-batch (0: its reports are not per micro-batch)
        self._ticker = None
        self.border_title = "Prefill"
        self.total = 0
        self.done = 0
        self.reused = 0
        self.elapsed = 0.0
        self.rate: float | None = None
        self.finished = False
        self.note = "no turn yet"
        self.template_note: str | None = None
        self.diverged: int | None = None
        self.shift = None  # the turn's ContextShifted: its oldest turns left out of the prompt
        self.waterfall = None  # (TTFT, timeline) of the finished turn: its compact waterfall
        self.cache_note: str = ""
        self.undo_note: str | None = None  # after Ctrl+Z: what the emptied KV cache means for the next turn

    # what ``shown`` keeps of a finished turn (Ctrl+L puts it aside with its chat, Ctrl+Z brings it back)
    SHOWN = ("total", "done", "reused", "elapsed", "rate", "finished", "note", "template_note", "diverged",
             "shift", "waterfall")

    def shown(self) -> tuple:
        return tuple(getattr(self, name) for name in self.SHOWN)

    def show(self, shown: tuple | None, undo_note: str | None = None) -> None:
        """The figures ``shown`` took (None: as cleared), and ``undo_note`` under them."""
        self.clear()
        if shown is not None:
            for name, value in zip(self.SHOWN, shown):
                setattr(self, name, value)
        self.undo_note = undo_note
        self.refresh(layout=True)

    def set_cache_note(self, note: str) -> None:
        before = self.wrapped_height()
        self.cache_note = note
        self.refresh(layout=self.wrapped_height() != before)

    def clear(self) -> None:
        """A new chat: the old turn's counts go (a stale pane is a wrong pane)."""
        self.total = self.done = self.reused = 0
        self.elapsed = 0.0
        self.rate = None
        self.finished = False
        self.note = "no turn yet"
        self.template_note = None
        self.diverged = None
        self.shift = None
        self.waterfall = None
        self.undo_note = None
        self.forecast_s, self.ubatch_size = None, 0
        self.stop_ticking()
        self.refresh(layout=True)

    def begin(self, started, shift=None) -> None:
        """A turn starts (``shift``: its ContextShifted, if the context was full): re-laid
        out only if the pane's height changes (a re-layout reflows the whole screen, and
        this lands as decode starts)."""
        before = self.wrapped_height()
        self.total = started.prompt_tokens
        self.reused = started.reused_tokens
        self.done = started.reused_tokens
        self.elapsed = 0.0
        self.rate = None
        self.finished = False
        self.note = "computing"
        self.template_note = started.template_fallback
        # the last prompt token is always computed again, for its logits: not a divergence
        d = started.first_diff_index
        self.diverged = d if d is not None and d < started.prompt_tokens - 1 else None
        self.shift = shift
        self.waterfall = None
        self.undo_note = None
        self._ubatch = 0
        self.forecast_s, self.ubatch_size = None, 0
        self._run_clock(0.0)
        self.refresh(layout=self.wrapped_height() != before)

    def expect(self, forecast_s: float | None, ubatch: int) -> None:
        """The turn's forecast of its prefill (seconds) and the engine's micro-batch size
        (0: unknown): the ETA and the tokens in flight before the first report."""
        self.forecast_s, self.ubatch_size = forecast_s, max(0, ubatch)
        self.refresh()

    def progress(self, p) -> None:
        before = self.wrapped_height()
        self.total, self.done, self.reused = p.total, p.done, p.reused
        self.elapsed, self.rate, self._ubatch = p.elapsed_s, p.tok_s, p.ubatch_tokens
        if p.done >= p.total:
            self.note = "done"
            self.stop_ticking()
        else:
            self._run_clock(p.elapsed_s)
        self.refresh(layout=self.wrapped_height() != before)

    def _run_clock(self, elapsed: float) -> None:
        self._since = (self.clock(), elapsed)
        if self._ticker is None and self.is_attached:
            self._ticker = self.set_interval(self.tick_s, lambda: self.tick(self.clock()))

    def tick(self, now: float) -> None:
        """The prefill's elapsed time at ``now``, from the last report (no-op when none runs)."""
        if self._since is None:
            return
        t0, e0 = self._since
        self.elapsed = e0 + max(0.0, now - t0)
        self.refresh()

    def stop_ticking(self) -> None:
        """The prefill ended (or its turn did): elapsed and ETA stay put."""
        self._since = None
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def finish(self, metrics, stop_reason: str) -> None:
        self.stop_ticking()
        self.finished = True
        self.done = metrics.reused_tokens + metrics.prefill_tokens
        self.total = metrics.prompt_tokens
        self.elapsed = metrics.prefill_s
        self.rate = metrics.prefill_tok_s
        before = self.wrapped_height()
        self.waterfall = (metrics.ttft_s, metrics.timeline) if metrics.ttft_s and metrics.timeline else None
        self.note = "cancelled" if stop_reason == "cancelled" and self.done < self.total else "done"
        self.refresh(layout=self.wrapped_height() != before)

    def refused(self, reason: str) -> None:
        self.stop_ticking()
        self.finished = True
        self.note = reason
        self.refresh(layout=True)

    def measuring(self, note: str) -> None:
        """The KV cache's quality measurement starts (tui/turn/quality.py): its progress here."""
        self.total = self.done = self.reused = self._ubatch = self.ubatch_size = 0
        self.elapsed, self.rate, self.finished, self.forecast_s = 0.0, None, False, None
        self.note, self.waterfall, self.shift, self.diverged = note, None, None, None
        self._run_clock(0.0)
        self.refresh(layout=True)

    def measured_so_far(self, done: int, total: int, elapsed: float) -> None:
        self._ubatch = max(0, done - self.done)  # the slice just reported: the one in flight is its size
        self.total, self.done, self.elapsed = total, done, elapsed
        self.rate = done / elapsed if elapsed > 0 and done > 0 else None
        self._run_clock(elapsed)
        self.refresh()

    def measurement_over(self, stopped: str | None) -> None:
        self.stop_ticking()
        self.finished = True
        self.note = ("quality measured: see the KV pane" if stopped is None else
                     "quality measurement stopped" if stopped == "cancelled" else "quality not measured")
        self.refresh(layout=True)

    def _shift_line(self) -> Content:
        """Reused against recomputed after a context shift: what dropping turns cost."""
        from kvtop.runner.policy.context_shift import turn_ranges

        e = self.shift
        n = len(e.dropped_turns)
        parts = [(f"context full: dropped turn{'' if n == 1 else 's'} {turn_ranges(e.dropped_turns)}", "$kvtop-warn")]
        if e.prefix_broken_at is None and not e.reused_tokens:  # the chat's line says the same (shift_line)
            parts.append(("; nothing was cached", "$text-muted"))
        elif e.prefix_broken_at is None:
            parts.append(("; cached prefix held", "$text-muted"))
        else:
            parts += [("; prefix broke at ", "$text-muted"), (fmt_int(e.prefix_broken_at), "$kvtop-warn"),
                      (": ", "$text-muted"), (fmt_int(e.reused_tokens), "$kvtop-reused"),
                      (" reused, ", "$text-muted"), (fmt_int(e.recomputed_tokens), "$kvtop-measured"),
                      (" recomputed (F2)", "$text-muted")]
        return Content.assemble(*parts)

    def eta(self) -> float | None:
        """Seconds left of the prefill at the rate measured so far (None: no rate yet),
        counting down between reports, but never below what the micro-batch in flight
        leaves after it. Once the countdown has run out with the last batch in flight,
        the pace so far with this wait counted: the ETA read "0 ms" for 12 s while F7's
        last slice ran (new-user trial); it never reads 0 before the end."""
        remaining = self.total - self.done
        if not self.rate or remaining <= 0 or self.finished:
            return None
        left = remaining / self.rate
        if self._since is not None:
            left = max(left - (self.elapsed - self._since[1]), max(0, remaining - self._ubatch) / self.rate)
            computed = self.done - self.reused
            if left <= 0 and computed > 0 and self.elapsed > 0:  # the last batch is late: the pace, this wait in it
                left = remaining * self.elapsed / computed
        return left

    def _eta_text(self, eta: float | None) -> str:
        if eta is not None:
            return fmt_seconds(eta)
        if self.forecast_s and not self.rate and not self.finished and self.done < self.total:
            return forecast_eta(self.forecast_s, self.elapsed)  # nothing measured yet: the forecast's
        return "-"

    def render(self) -> Content:
        w = max(0, self.size.width - 2)
        total = max(self.total, 1)
        computed = self.done - self.reused
        b = bar(w, [(self.reused / total, "$kvtop-reused"), (computed / total, "$kvtop-measured")])
        eta = self.eta()
        line1 = Content.assemble(
            (f"{fmt_int(self.done)}/{fmt_int(self.total)} tok", "bold"), "  ",
            ("reused ", "$text-muted"), (fmt_int(self.reused), "$kvtop-reused"), "  ",
            # F7's pace: the chat through every cache measured, no prefill rate (it read "pp 3.9 tok/s")
            ("rate " if self.note.startswith(("measuring", "quality")) else "pp ", "$text-muted"),
            fmt_rate(self.rate),
        )
        line2 = Content.assemble(
            # the clock runs before the first report too (F7's measurement read "elapsed N/A" for 20 s)
            ("elapsed ", "$text-muted"), fmt_seconds(self.elapsed if self.total or self._since else None), "  ",
            ("ETA ", "$text-muted"), self._eta_text(eta), "  ",
            (in_flight(self.note, self.done, self.total, self.ubatch_size), "$text-muted"),
        )
        lines = [b, line1, line2]
        if self.waterfall is not None:
            lines += compact_waterfall(*self.waterfall, self.content_region.width)
        if self.undo_note:  # before the last turn's details: it is what the next turn will do
            lines.append(Content.styled(self.undo_note, "$kvtop-warn"))
        if self.shift is not None:
            lines.append(self._shift_line())
        elif self.diverged is not None:
            lines.append(Content.assemble(("cache diverged at token ", "$text-muted"), (fmt_int(self.diverged), "$kvtop-warn"),
                                          (" (F2: waterfall)", "$text-muted")))
        if self.cache_note:
            lines.append(Content.styled(self.cache_note, "$kvtop-reused"))
        if self.template_note:
            lines.append(Content.styled(f"template fallback: {self.template_note}", "$kvtop-warn"))
        return Content("\n").join(fold(lines, self.content_region.width, self.content_region.height))
