"""The fleet pane (``kvtop --server URL1 --server URL2 …``): one row per server
(llama-server or vLLM: a vLLM's row has requests running and its KV pool's share), as nvitop lists GPUs. F4 moves the chat and the dashboard to the next server."""

from __future__ import annotations

from textual.content import Content

from kvtop.runner.units import fmt_int, fmt_rate
from kvtop.tui.panes.base import PaneWidget


class FleetPane(PaneWidget):
    def __init__(self, urls: tuple[str, ...], **kw) -> None:
        super().__init__(**kw)
        self.border_title = "Fleet (F4: next server)"
        self.urls = urls
        self.snapshots: dict[int, object] = {}
        self._shown: dict[int, tuple] = {}  # each row as drawn (``_cells``)
        self.selected = 0

    def set_snapshot(self, index: int, snapshot) -> None:
        """A poll of one server. An idle fleet's polls change nothing on screen: a row
        that reads the same is not redrawn (50 servers redrawn at every poll cost 12% of a
        core; kept, the fleet costs what its polls do)."""
        self.snapshots[index] = snapshot
        cells = self._cells(index, snapshot)
        if self._shown.get(index) == cells:
            return
        before = self.wrapped_height()
        self._shown[index] = cells
        self.refresh(layout=self.wrapped_height() != before)

    def select(self, index: int) -> None:
        self.selected = index
        self.refresh()

    def _cells(self, i: int, s) -> tuple:
        """What row ``i`` shows of snapshot ``s``, as the strings drawn."""
        url = self.urls[i]
        if s is None:
            return (url, None, "not polled yet")
        if not s.reachable:
            return (url, None, f"unreachable: {s.error}")
        r = s.rates
        b = s.batch  # a server without slots (vLLM): requests running, its KV pool's share
        slots = f"{fmt_int(s.busy)}/{fmt_int(len(s.slots))}" if s.slots else \
            f"{fmt_int(b.running)} run" if b is not None else "-"
        kv = f"{b.kv_usage:.0%}" if b is not None and b.kv_usage is not None else fmt_int(s.kv_used)
        return (url, ((s.model or "?")[:24], slots, kv, fmt_rate(r.prompt_tok_s if r else None),
                      fmt_rate(r.gen_tok_s if r else None), fmt_int(r.requests_deferred) if r else "-"),
                "; ".join(n for n in (None if b is not None else s.slots_note, s.metrics_note) if n))

    def render(self) -> Content:
        lines = [Content.styled(f"  {'#':>2} {'server':<28} {'model':<24} {'slots':>7} {'KV used':>9} "
                                f"{'prompt':>11} {'gen':>11} {'deferred':>8}  last error", "$text-muted")]
        for i in range(len(self.urls)):
            url, figures, note = self._shown.get(i) or self._cells(i, None)
            mark = ("▶ ", "bold $kvtop-measured") if i == self.selected else ("  ", "")
            head = f"{i + 1:>2} {url[:28]:<28} "
            if figures is None:
                style = "$text-muted" if note == "not polled yet" else "$kvtop-critical"
                lines.append(Content.assemble(mark, head, (note, style)))
                continue
            model, slots, kv, prompt, gen, deferred = figures
            lines.append(Content.assemble(
                mark, f"{head}{model:<24} {slots:>7} {kv:>9} {prompt:>11} {gen:>11} {deferred:>8}  ",
                (note, "$kvtop-warn")))
        return Content("\n").join(lines)
