"""Prefill progress: a bar with reused tokens already filled, rate and ETA.

It stays on screen after the turn with the final figures.
"""

from __future__ import annotations

from textual.content import Content

from ..format import bar, fmt_int, fmt_rate, fmt_seconds
from .base import PaneWidget


class PrefillPane(PaneWidget):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
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
        self.cache_note: str = ""

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
        self.refresh(layout=True)

    def begin(self, started) -> None:
        """A turn starts: re-laid out only if the pane's height changes (a re-layout
        reflows the whole screen, and this lands as decode starts)."""
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
        self.refresh(layout=self.wrapped_height() != before)

    def progress(self, p) -> None:
        before = self.wrapped_height()
        self.total, self.done, self.reused = p.total, p.done, p.reused
        self.elapsed, self.rate = p.elapsed_s, p.tok_s
        if p.done >= p.total:
            self.note = "done"
        self.refresh(layout=self.wrapped_height() != before)

    def finish(self, metrics, stop_reason: str) -> None:
        self.finished = True
        self.done = metrics.reused_tokens + metrics.prefill_tokens
        self.total = metrics.prompt_tokens
        self.elapsed = metrics.prefill_s
        self.rate = metrics.prefill_tok_s
        before = self.wrapped_height()
        self.note = "cancelled" if stop_reason == "cancelled" and self.done < self.total else "done"
        self.refresh(layout=self.wrapped_height() != before)

    def refused(self, reason: str) -> None:
        self.finished = True
        self.note = reason
        self.refresh(layout=True)

    def render(self) -> Content:
        w = max(0, self.size.width - 2)
        total = max(self.total, 1)
        computed = self.done - self.reused
        b = bar(w, [(self.reused / total, "$kvtop-reused"), (computed / total, "$kvtop-measured")])
        remaining = self.total - self.done
        eta = remaining / self.rate if self.rate and remaining > 0 and not self.finished else None
        line1 = Content.assemble(
            (f"{fmt_int(self.done)}/{fmt_int(self.total)} tok", "bold"), "  ",
            ("reused ", "$text-muted"), (fmt_int(self.reused), "$kvtop-reused"), "  ",
            ("pp ", "$text-muted"), fmt_rate(self.rate),
        )
        line2 = Content.assemble(
            ("elapsed ", "$text-muted"), fmt_seconds(self.elapsed if self.total else None), "  ",
            ("ETA ", "$text-muted"), fmt_seconds(eta) if eta is not None else "-", "  ",
            (self.note, "$text-muted"),
        )
        lines = [b, line1, line2]
        if self.diverged is not None:
            lines.append(Content.assemble(("cache diverged at token ", "$text-muted"), (fmt_int(self.diverged), "$kvtop-warn"),
                                          (" (F2: waterfall)", "$text-muted")))
        if self.cache_note:
            lines.append(Content.styled(self.cache_note, "$kvtop-reused"))
        if self.template_note:
            lines.append(Content.styled(f"template fallback: {self.template_note}", "$kvtop-warn"))
        return Content("\n").join(lines)
