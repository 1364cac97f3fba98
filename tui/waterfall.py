"""The TTFT waterfall (F2): where the last turn's time to first token went.

A stacked bar and a table of contiguous segments (wait, template, tokenize, cache
lookup, each prefill ubatch, first decode and sample, first visible character)
that add up to the measured TTFT, with the predicted time beside each prefill
micro-batch and a verdict for the biggest cause.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Static

from runner.physics.diagnosis import predicted_ubatch_seconds, ttft_verdict

from .format import fmt_seconds

SEGMENT_STYLES = ["$kvtop-kv-full", "$kvtop-kv-sliding", "$kvtop-kv-latent", "$kvtop-kv-recurrent",
                  "$kvtop-reused", "$kvtop-warn"]


def segment_style(label: str, i: int) -> str:
    if label.startswith("ubatch"):
        return "$kvtop-measured"
    if label.startswith("wait"):
        return "$kvtop-critical"
    return SEGMENT_STYLES[i % len(SEGMENT_STYLES)]


class WaterfallBar(Widget):
    def __init__(self, timeline, ttft: float, **kw) -> None:
        super().__init__(**kw)
        self.timeline = timeline
        self.ttft = ttft

    def render(self) -> Content:
        w = max(1, self.size.width)
        parts, used, acc = [], 0, 0.0
        for i, (label, _start, dt) in enumerate(self.timeline):
            acc += dt
            end = min(w, round(acc / self.ttft * w)) if self.ttft else 0
            if end > used:
                parts.append(("█" * (end - used), segment_style(label, i)))
                used = end
        if used < w:
            parts.append(("░" * (w - used), "$kvtop-bar-empty"))
        return Content.assemble(*parts)


def waterfall_table(metrics, facts, tflops, layers) -> Content:
    timeline = metrics.timeline
    preds = predicted_ubatch_seconds(facts.n_params_active if facts else None, tflops, layers,
                                     metrics.ubatches, metrics.reused_tokens)
    pred_by_label = {}
    k = 0
    for label, _s, _d in timeline:
        if label.startswith("ubatch"):
            pred_by_label[label] = preds[k] if k < len(preds) else None
            k += 1
    w = max([len(seg[0]) for seg in timeline] + [8]) + 2
    rows = [Content.assemble((f"{'segment':<{w}}  {'start':>9}  {'measured':>9}  {'predicted':>9}  {'share':>6}",
                              "bold $text-muted"))]
    for i, (label, start, dt) in enumerate(timeline):
        pred = pred_by_label.get(label)
        share = dt / metrics.ttft_s * 100 if metrics.ttft_s else 0
        rows.append(Content.assemble(("■ ", segment_style(label, i)), f"{label:<{w - 2}}  ",
                                     f"{fmt_seconds(start):>9}  ", (f"{fmt_seconds(dt):>9}", "$kvtop-measured"),
                                     f"  {fmt_seconds(pred) if pred is not None else '-':>9}  {share:>5.1f}%"))
    total = sum(dt for _, _, dt in timeline)
    rows.append(Content.assemble((f"{'sum of segments':<{w}}  {'':>9}  {fmt_seconds(total):>9}", "bold"),
                                 f"   TTFT measured {fmt_seconds(metrics.ttft_s)}"))
    return Content("\n").join(rows)


class WaterfallScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f2,q", "dismiss", "Close")]

    def __init__(self, turn: dict | None, facts, tflops) -> None:
        super().__init__()
        self.turn = turn
        self.facts = facts
        self.tflops = tflops

    def compose(self) -> ComposeResult:
        from runner.events import TurnMetrics

        with VerticalScroll(id="waterfall-box", classes="dialog"):
            if not self.turn:
                yield Static(Content("No turn yet: send a message, then press F2."), markup=False)
                return
            m = TurnMetrics(**{k: (tuple(tuple(x) for x in v) if k in ("ubatches", "timeline") else v)
                               for k, v in self.turn["metrics"].items()})
            yield Static(Content.styled(f"Time to first token: {fmt_seconds(m.ttft_s)}", "bold"), markup=False)
            yield WaterfallBar(m.timeline, m.ttft_s or 0, id="waterfall-bar")
            layers = self.facts.layers if self.facts else []
            yield Static(waterfall_table(m, self.facts, self.tflops, layers), markup=False, id="waterfall-table")
            verdict = ttft_verdict(m, self.turn.get("first_diff_index"), self.turn.get("diff_context"))
            yield Static(Content.styled(verdict, "italic"), markup=False, id="waterfall-verdict")
