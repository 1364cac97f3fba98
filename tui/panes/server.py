"""The server pane (``kvtop --server``): every slot of the llama-server, not only
kvtop's own, the server's counters as rates, and the many-users physics: the batched
decode ceiling for the slots decoding now, and how many more conversations fit."""

from __future__ import annotations

from textual.content import Content

from kvtop.runner.server.spec_metrics import spec_phrases
from kvtop.runner.units import fmt_int, fmt_rate
from kvtop.tui.base.format import pack
from kvtop.tui.panes.base import PaneWidget, lines_at

HEADER = f"{'slot':>4} {'state':<6} {'task':>6} {'tokens':>8} {'computed':>9} {'cached':>7} {'decoded':>8}  ctx used"
# the table where its lines would wrap (120x40 gives the pane 62 columns): narrower
# columns, and the context used as a share of the slot's n_ctx (the status bar says n_ctx)
NARROW_HEADER = f"{'slot':>4} {'state':<5}{'task':>5}{'tokens':>7}{'computed':>9}{'cached':>7}{'decoded':>8}{'ctx':>5}"
# below ~51 columns (a terminal under ~55): what a slot is doing, and how full it is
TINY_HEADER = f"{'slot':>4} {'state':<5}{'cached':>7}{'decoded':>8}{'ctx':>5}"


class ServerPane(PaneWidget):
    def __init__(self, url: str, **kw) -> None:
        super().__init__(**kw)
        self.border_title = "Server"
        self.url = url
        self.snapshot = None  # runner.server.monitor.ServerSnapshot
        self.ceiling = None  # runner.physics.batching.BatchCeiling
        self.spec_ceiling = None  # runner.physics.batching.SpecBatchCeiling: the slots speculating
        self.more_fit: int | None = None
        self.average_length: float | None = None
        self.own_slot: int | None = None
        self.perf = None  # runner.physics.batch_roof.perf_check's: kvtop's FLOPs/bytes beside vLLM's
        self.restart_note: str | None = None  # the last restart seen, with its time (until the next)
        self._drawn: tuple | None = None  # what the last redraw showed (text and styles)
        self._height = -1  # its lines at the pane's width
        self._planning_width: int | None = None  # the width height_at measures for

    def height_at(self, width: int) -> int:
        self._planning_width = width
        try:
            return super().height_at(width)
        finally:
            self._planning_width = None

    def _table(self, slots) -> list[Content]:
        """The slot table: its full form, or the narrow one where a full line would wrap."""
        width = self._planning_width or self.content_region.width
        lines = [Content.styled(HEADER, "$text-muted")] + [self._slot_line(sl) for sl in slots]
        for form, header in (("narrow", NARROW_HEADER), ("tiny", TINY_HEADER)):
            if 0 < width < max(line.cell_length for line in lines):
                lines = [Content.styled(header, "$text-muted")] + [self._slot_line(sl, form) for sl in slots]
        return lines

    def set_snapshot(self, snapshot, ceiling=None, more_fit: int | None = None,
                     average_length: float | None = None) -> None:
        """Once a poll: the pane is drawn again only when what it shows changed, and laid
        out again only when its height did (a live rate changes every poll while a slot
        decodes: one render per poll, not three)."""
        self.snapshot, self.ceiling, self.more_fit, self.average_length = snapshot, ceiling, more_fit, average_length
        drawn = self.render()
        key = (drawn.plain, tuple(drawn.spans))
        if key == self._drawn:  # an idle server polled again: nothing to redraw
            return
        self._drawn = key
        height = lines_at(drawn, self.content_region.width)
        self.refresh(layout=height != self._height)
        self._height = height

    def set_restart(self, line: str, wall: str) -> None:
        """The server restarted (``runner.server.identity``): said under the pane's head
        until another restart, with the time it was seen."""
        self.restart_note = f"{wall} {line}"
        self.set_snapshot(self.snapshot, self.ceiling, self.more_fit, self.average_length)

    def render(self) -> Content:
        s = self.snapshot
        head = [("server ", "$text-muted"), (self.url, "bold")]
        if s is None:
            return Content.assemble(*head, ("  waiting for the first poll", "$text-muted"))
        if not s.reachable:
            return Content.assemble(*head, "\n", (f"unreachable: {s.error}; retrying on kvtop's pace",
                                                   "bold $kvtop-critical"))
        # each line a run of phrases broken only between them (runner's pack): word-wrapped,
        # "1,147 / prompt" and "(counters + / slots, last 1.0 s)" fell on two lines at 80 and 120
        width = self._planning_width or self.content_region.width
        lines = pack([Content.assemble(*head), *self._counts(s)], width)
        if self.restart_note:
            lines.append(Content.styled(self.restart_note, "$kvtop-warn"))
        lines += pack(self._rates(s), width)
        if s.rates is not None and s.metrics_note:  # counters refused: shown as N/A, and why
            lines.append(Content.styled(s.metrics_note, "$kvtop-warn"))
        lines += pack(self._physics(s), width)
        lines += pack([Content.styled(p, "$kvtop-measured") for p in spec_phrases(getattr(s, "spec", None))], width)
        if s.batch is not None:  # a server without slots (vLLM): its batch, KV pool and percentiles
            from kvtop.tui.panes.batch_lines import batch_lines

            lines += batch_lines(s.batch)
        elif s.slots_note:
            lines.append(Content.styled(f"slots: {s.slots_note}", "$kvtop-warn"))
        else:
            lines += self._table(s.slots[:64])
            if len(s.slots) > 64:
                lines.append(Content.styled(f"… {fmt_int(len(s.slots) - 64)} more slots", "$text-muted"))
        return Content("\n").join(lines)

    def _counts(self, s) -> list[Content]:
        out: list[Content] = []
        if s.slots:
            out.append(Content.assemble(("slots ", "$text-muted"), f"{fmt_int(s.busy)}/{fmt_int(len(s.slots))} busy"))
        r = s.rates
        if r is not None and r.requests_deferred is not None and s.batch is None:  # a batch says "waiting"
            style = "bold $kvtop-critical" if r.requests_deferred else ""
            out.append(Content.assemble(("deferred ", "$text-muted"), (fmt_int(r.requests_deferred), style)))
        return out

    def _rates(self, s) -> list[Content]:
        r = s.rates
        if r is None:
            return [Content.styled(f"metrics: {s.metrics_note or 'none yet'}", "$kvtop-warn")]
        if r.interval_s <= 0:
            return [Content.styled("metrics: rates after the next poll", "$text-muted")]
        return [Content.assemble(("prompt ", "$text-muted"), fmt_rate(r.prompt_tok_s), ("  gen ", "$text-muted"),
                                 fmt_rate(r.gen_tok_s)),
                Content.styled(f"({'counters + slots' if s.slots else 'counters'}, last {r.interval_s:.1f} s)",
                               "$text-muted"),
                *([] if s.batch is not None else  # a batch says "running"
                  [Content.assemble(("processing ", "$text-muted"), fmt_int(r.requests_processing))]),
                Content.assemble(("since start ", "$text-muted"), f"{fmt_int(r.prompt_tokens_total)} prompt,"),
                Content(f"{fmt_int(r.gen_tokens_total)} generated tok")]

    def _physics(self, s) -> list[Content]:
        items: list[Content] = []
        c = self.ceiling
        if c is not None:
            measured = s.rates.gen_tok_s if s.rates else None
            items += [Content.assemble(("batched ceiling ", "$text-muted"), (fmt_rate(c.aggregate_tok_s), "$kvtop-ceiling")),
                      Content.styled(f"for {fmt_int(c.slots)} decoding ({fmt_rate(c.per_user_tok_s)} each"
                                     + (", compute-bound)" if c.bound == "compute" else ")"), "$text-muted")]
            if measured:
                items.append(Content.assemble(("measured ", "$text-muted"), (fmt_rate(measured), "$kvtop-measured"),
                                              f" {measured / c.aggregate_tok_s * 100:.0f}%"))
            sc = self.spec_ceiling
            if sc is not None:  # the server speculates: the roof its measured acceptance lifts (or lowers)
                items += [Content.assemble(("with speculation ", "$text-muted"),
                                           (fmt_rate(sc.aggregate_tok_s), "$kvtop-ceiling"),
                                           f" ({sc.over_plain(c):.2f}x)"),
                          Content.styled(f"({sc.tokens_per_pass:.1f} tok/pass, drafts of {sc.draft},"
                                         + (" compute-bound)" if sc.bound == "compute" else " bandwidth-bound)"),
                                         "$text-muted")]
        else:
            items.append(Content.styled("batched ceiling: needs the model's facts (--model GGUF, or the folder a "
                                        "local vLLM serves) and a bandwidth", "$text-muted"))
        if s.batch is not None and self.perf is not None:
            from kvtop.tui.panes.batch_lines import perf_lines

            items += perf_lines(self.perf)
        if self.more_fit is not None and self.average_length:
            items.append(Content.assemble(("+", "$text-muted"), fmt_int(self.more_fit),
                                          (f" conversations of {fmt_int(round(self.average_length))} tokens fit",
                                           "$text-muted")))
        return items

    def _slot_line(self, sl, form: str = "full") -> Content:
        state = ("busy", "bold $kvtop-measured") if sl.is_processing else ("idle", "$text-muted")
        used = f"{fmt_int(sl.n_prompt_tokens)}/{fmt_int(sl.n_ctx)}" if sl.n_ctx else "-"
        mark = "*" if sl.id == self.own_slot else " "
        task = "-" if sl.id_task is None else str(sl.id_task)
        share = f"{min(sl.n_prompt_tokens / sl.n_ctx, 9.99):.0%}" if sl.n_ctx else "-"
        if form == "tiny":
            return Content.assemble(f"{mark}{sl.id:>3} ", (f"{state[0]:<5}", state[1]),
                                    f"{fmt_int(sl.n_cached):>7}{fmt_int(sl.n_decoded):>8}{share:>5}")
        if form == "narrow":
            return Content.assemble(f"{mark}{sl.id:>3} ", (f"{state[0]:<5}", state[1]),
                                    f"{task:>5}{fmt_int(sl.n_prompt_tokens):>7}{fmt_int(sl.n_processed):>9}"
                                    f"{fmt_int(sl.n_cached):>7}{fmt_int(sl.n_decoded):>8}{share:>5}")
        return Content.assemble(f"{mark}{sl.id:>3} ", (f"{state[0]:<6}", state[1]),
                                f" {task:>6} {fmt_int(sl.n_prompt_tokens):>8} {fmt_int(sl.n_processed):>9}"
                                f" {fmt_int(sl.n_cached):>7} {fmt_int(sl.n_decoded):>8}  {used}")
