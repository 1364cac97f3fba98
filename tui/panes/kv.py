"""KV cache fill: cells used of n_ctx, bytes used and allocated, per attention kind."""

from __future__ import annotations

import re

from rich.cells import cell_len
from textual.content import Content

from kvtop.tui.base.format import bar, fmt_bytes, fmt_int, fmt_rate, fmt_seconds, pack
from kvtop.tui.panes.base import PaneWidget, lines_at

QUALITY_ROWS = 1  # F7's measurements (q8_0 and q4_0 against f16), kept whether measured or not

KIND_STYLE = {
    "full": "$kvtop-kv-full",
    "sliding": "$kvtop-kv-sliding",
    "latent": "$kvtop-kv-latent",
    "recurrent": "$kvtop-kv-recurrent",
}


class KVPane(PaneWidget):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.border_title = "KV cache"
        self.layout_ = None  # runner.physics.kv_bytes.KVLayout
        self.allocated_llama: float | None = None  # bytes, from llama.cpp's log
        self.cells = 0
        self.n_ctx = 0
        self.slots = 1  # a server's slots: the allocated KV is every slot's
        self.rate: float | None = None
        self.server_cells: tuple[tuple[int, ...], int] | None = None  # (each slot's cells, total)
        self.quality: list[str] = []  # measured KLD per cache type (tui/turn/quality.py)
        self.quality_brief: list[str] = []  # the same, one short line each

    def set_quality(self, lines: list[str], briefs: list[str] | None = None) -> None:
        """F7's measurements: whole where one fits its row, else in brief, in the one
        row the pane always keeps for them (at 160x48 two quality lines of three rows each moved
        Estimate and Memory to a second page)."""
        self.quality, self.quality_brief = list(lines), list(briefs or lines)
        self.refresh()

    def _quality_rows(self, width: int) -> list[Content]:
        """One row: the whole line where one measurement's fits, else every one in brief."""
        if not self.quality:
            return [Content("")]
        whole = self.quality[0]
        row = whole if len(self.quality) == 1 and cell_len(whole) <= width else "KLD " + " · ".join(self.quality_brief)
        if cell_len(row) > width:  # both figures before the savings: at 80x24 q4_0's read "(−…"
            row = re.sub(r" \([−+]\d+%\)", "", row)
        return [Content.styled(row if cell_len(row) <= width else row[:max(0, width - 1)] + "…", "$text-muted")]

    def height_at(self, width: int) -> int:
        """The plan's lines: the quality rows are always counted, measured or not."""
        return lines_at(self._body(self.size.width), width) + QUALITY_ROWS if width > 0 else -1

    def set_server_cells(self, used: tuple[int, ...], total: int) -> None:
        """A llama-server's poll: the cells every slot holds. The bar above is this chat's
        slot, which stays empty while others (``kvtop load``, other clients) fill the rest:
        without this line the pane read "0/1,024 cells" beside four busy slots."""
        before = self.wrapped_height()
        self.server_cells = (used, total)
        self.refresh(layout=self.wrapped_height() != before)

    def set_layout(self, layout, n_ctx: int, allocated_bytes: float | None, slots: int = 1) -> None:
        """``n_ctx``: the chat's own context (a server slot's); ``layout``: everything
        allocated (every slot of a server: ``slots``)."""
        self.layout_ = layout
        self.n_ctx = n_ctx
        self.allocated_llama = allocated_bytes
        self.slots = slots
        self.refresh(layout=True)

    def clear(self) -> None:
        """A new chat: an empty cache and no decode rate to project its filling from."""
        self.rate = None
        self.cells = 0
        self.refresh(layout=True)  # its lines change (the "full in" projection): measured again

    def set_cells(self, cells: int, rate: float | None = None) -> None:
        before = self.wrapped_height()
        self.cells = cells
        if rate is not None:
            self.rate = rate
        # a re-layout only when the pane's height changes: per-update redraws stay cheap
        # (the "full in" line is there from the start, so decode starting rarely changes it)
        self.refresh(layout=self.wrapped_height() != before)

    def render(self) -> Content:
        rows = self._quality_rows(self.content_region.width or max(1, self.size.width - 2))
        return Content("\n").join([self._body(self.size.width), *rows])

    def _body(self, width: int) -> Content:
        """Everything but the quality rows, at ``width`` cells."""
        w = max(0, width - 2)
        n_ctx = max(self.n_ctx, 1)
        lay = self.layout_
        cells = Content.assemble((f"{fmt_int(self.cells)}/{fmt_int(self.n_ctx)} cells", "bold"),
                                 (f" {self.cells / n_ctx * 100:.1f}%", "$text-muted"),
                                 *((("  ", ""), (fmt_bytes(lay.bytes_per_token), ""), ("/token", "$text-muted"))
                                   if lay is not None else ()))
        if self.server_cells is not None and cells.cell_length + 10 <= width:
            # beside the all-slots line: this is the chat's own slot (a load's trial read "0/1,024 cells" as the server's)
            cells = Content.assemble(("this chat ", "$text-muted"), cells)
        lines = [bar(w, [(self.cells / n_ctx, "$kvtop-kv-full")]), cells]
        allocated = None if lay is None else fmt_bytes(
            self.allocated_llama if self.allocated_llama is not None else lay.bytes_allocated)
        if self.server_cells is not None:  # one line for the whole server, in place of the slot's bytes
            per_slot, total = self.server_cells
            used_all = sum(per_slot)
            lines.append(Content.assemble(
                (f"all {fmt_int(self.slots)} slots ", "$text-muted"), (f"{fmt_int(used_all)}/{fmt_int(total)} cells", "bold"),
                (f" {used_all / max(total, 1) * 100:.1f}%", "$text-muted"),
                *(((" · ", "$text-muted"), fmt_bytes(sum(lay.bytes_used(n) for n in per_slot)),
                   (" of ", "$text-muted"), allocated, (" allocated", "$text-muted")) if lay is not None else ())))
        elif lay is not None:
            lines.append(Content.assemble(
                ("used ", "$text-muted"), fmt_bytes(lay.bytes_used(self.cells)), (" of ", "$text-muted"), allocated,
                (" allocated" + (f" ({self.slots} slots)" if self.slots > 1 else ""), "$text-muted")))
        if lay is not None:
            # a server's layout holds every slot's cells: each kind's bytes are all the slots'
            # (a trial read "■ full 30L×2,048 0 B" under "all 2 slots 106/2,048 cells")
            counted = self.server_cells[0] if self.server_cells is not None else (self.cells,)
            for k in lay.kinds:
                used_k = sum(k.bytes_used(n) for n in counted)
                what = "state" if k.kind == "recurrent" else fmt_int(k.cells)
                lines += pack([Content.assemble(("■ ", KIND_STYLE.get(k.kind, "")), (f"{k.kind:<8}", KIND_STYLE.get(k.kind, ""))),
                               f"{fmt_int(k.n_layers)}L×{what}", f"{fmt_bytes(used_k)}/{fmt_bytes(k.bytes_allocated)}"],
                              width, gap=" ")
        left = self.n_ctx - self.cells
        # the engine stops at the last cell (runner/engine/decode.py: pos + 1 >= n_ctx; the token it
        # samples there is never decoded), so one cell left is a full context: the pane said "full in
        # 1 tok ≈ 173 ms" under a reply that had just ended "context full"
        if self.rate and left > 1:
            lines += pack([Content.assemble(("full in ", "$text-muted"), f"{fmt_int(left)} tok"),
                           f"≈ {fmt_seconds(left / self.rate)}", f"at {fmt_rate(self.rate)}"], width, gap=" ")
        elif left <= 1 and self.n_ctx:
            lines.append(Content.styled("context full: Ctrl+L starts a new chat", "bold $kvtop-critical"))
        elif self.n_ctx:
            lines += pack([Content.assemble(("full in ", "$text-muted"), f"{fmt_int(left)} tok ≈ -"),
                           "(no decode rate yet)"], width, gap=" ")
        return Content("\n").join(lines)
