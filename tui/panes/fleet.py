"""The fleet pane (``kvtop --server URL1 --server URL2 …``): one row per llama-server,
as nvitop lists GPUs. F4 moves the chat and the dashboard to the next server."""

from __future__ import annotations

from textual.content import Content

from runner.units import fmt_int, fmt_rate

from .base import PaneWidget


class FleetPane(PaneWidget):
    def __init__(self, urls: tuple[str, ...], **kw) -> None:
        super().__init__(**kw)
        self.border_title = "Fleet (F4: next server)"
        self.urls = urls
        self.snapshots: dict[int, object] = {}
        self.selected = 0

    def set_snapshot(self, index: int, snapshot) -> None:
        before = self.wrapped_height()
        self.snapshots[index] = snapshot
        self.refresh(layout=self.wrapped_height() != before)

    def select(self, index: int) -> None:
        self.selected = index
        self.refresh()

    def render(self) -> Content:
        lines = [Content.styled(f"  {'#':>2} {'server':<28} {'model':<24} {'slots':>7} {'KV used':>9} "
                                f"{'prompt':>11} {'gen':>11} {'deferred':>8}  last error", "$text-muted")]
        for i, url in enumerate(self.urls):
            s = self.snapshots.get(i)
            mark = ("▶ ", "bold $kvtop-measured") if i == self.selected else ("  ", "")
            if s is None:
                lines.append(Content.assemble(mark, f"{i + 1:>2} {url[:28]:<28} ", ("not polled yet", "$text-muted")))
                continue
            if not s.reachable:
                lines.append(Content.assemble(mark, f"{i + 1:>2} {url[:28]:<28} ",
                                              (f"unreachable: {s.error}", "$kvtop-critical")))
                continue
            r = s.rates
            slots = f"{fmt_int(s.busy)}/{fmt_int(len(s.slots))}" if s.slots else "-"
            deferred = fmt_int(r.requests_deferred) if r else "-"
            note = s.slots_note or s.metrics_note or ""
            lines.append(Content.assemble(
                mark, f"{i + 1:>2} {url[:28]:<28} {(s.model or '?')[:24]:<24} {slots:>7} {fmt_int(s.kv_used):>9} "
                f"{fmt_rate(r.prompt_tok_s if r else None):>11} {fmt_rate(r.gen_tok_s if r else None):>11} "
                f"{deferred:>8}  ", (note, "$kvtop-warn")))
        return Content("\n").join(lines)
