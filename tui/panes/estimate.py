"""Estimate vs actual: what the physics predicts beside what was measured, and why they differ."""

from __future__ import annotations

import math

from textual.content import Content

from ..format import NA, fmt_bytes, fmt_rate, fmt_seconds
from .base import PaneWidget


def verdict(rows: dict, ctx: dict) -> str:
    """One line: the most likely reason for the biggest gap between estimate and measurement."""
    gaps = {}
    for key in ("prefill", "decode", "ttft"):
        pred, meas = rows.get(key, (None, None))
        if pred and meas:
            gaps[key] = abs(math.log(meas / pred))
    if not gaps:
        return "send a message to compare the estimate with a measured turn"
    worst = max(gaps, key=gaps.__getitem__)
    pred, meas = rows[worst]
    ratio = meas / pred
    if ctx.get("gpu_present") and ctx.get("n_gpu_layers", 0) == 0:
        return "all layers run on the CPU although a GPU is present: try -ngl 99"
    if gaps[worst] < math.log(1.25):
        return f"measured within 25% of the estimate ({worst} {ratio:.2f}x): running near the hardware's limits"
    if worst in ("prefill", "ttft"):
        if worst == "ttft":
            pp_pred, pp_meas = rows.get("prefill", (None, None))
            if not (pp_pred and pp_meas):
                return f"TTFT {ratio:.2f}x the estimate: time outside prefill (queueing, template, first sample)"
            ratio = pp_meas / pp_pred
        if ctx.get("prompt_tokens", 0) < 64:
            return (f"prefill at {ratio:.2f}x of the estimate: a {ctx.get('prompt_tokens')}-token prompt is too short "
                    f"to keep the matrix units busy")
        if ctx.get("n_ubatch", 512) < 128:
            return f"prefill at {ratio:.2f}x of the estimate: ubatch {ctx.get('n_ubatch')} is too small (-ub)"
        if ctx.get("on_cpu", True):
            return (f"prefill at {ratio:.2f}x of the estimate: quantised CPU kernels reach less than the "
                    f"float32 matmul probe's FLOPS")
        return f"prefill at {ratio:.2f}x of the estimate: compute not saturated"
    if ctx.get("kv_quantised"):
        return f"decode at {ratio:.2f}x of the ceiling: quantised KV ({ctx.get('kv_types')}) adds dequantisation work"
    weights = ctx.get("weights_bytes") or 0
    if weights and weights < 512 * 1024 * 1024 and ratio < 1:
        per_tok = 1 / meas * 1000 if meas else 0
        return (f"decode at {ratio:.2f}x of the bandwidth ceiling: a tiny model ({fmt_bytes(weights)}) is "
                f"bound by per-token overhead ({per_tok:.1f} ms/token), not by reading the weights")
    return f"decode at {ratio:.2f}x of the bandwidth ceiling: memory bandwidth not saturated (threads? other load?)"


class EstimatePane(PaneWidget):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.border_title = "Estimate vs actual"
        self.rows: dict[str, tuple[float | None, float | None]] = {}
        self.context: dict = {}
        self.note = ""

    def set_rows(self, rows: dict, context: dict, note: str = "") -> None:
        self.rows = rows
        self.context = context
        self.note = note
        self.refresh(layout=True)

    def render(self) -> Content:
        spec = [
            ("ttft", "TTFT", fmt_seconds, True),
            ("prefill", "prefill", fmt_rate, False),
            ("decode", "decode", fmt_rate, False),
            ("kv", "KV bytes", fmt_bytes, False),
            ("weights", "weights", fmt_bytes, False),
            ("peak", "peak mem", fmt_bytes, False),
        ]
        w_label, w_col = 9, 12
        lines = [Content.assemble((f"{'':<{w_label}}", ""), (f"{'predicted':>{w_col}}", "$text-muted"),
                                  (f"{'measured':>{w_col}}", "$text-muted"), (f"{'ratio':>8}", "$text-muted"))]
        for key, label, fmt, lower_is_better in spec:
            pred, meas = self.rows.get(key, (None, None))
            ratio = meas / pred if pred and meas else None
            if ratio is None:
                style, rtxt = "$text-muted", NA
            else:
                good = ratio <= 1.25 if lower_is_better else ratio >= 0.8
                ok = ratio <= 2 if lower_is_better else ratio >= 0.4
                style = "$kvtop-ok" if good else "$kvtop-warn" if ok else "$kvtop-critical"
                rtxt = f"{ratio:.2f}x"
            lines.append(Content.assemble(f"{label:<{w_label}}", f"{fmt(pred):>{w_col}}",
                                          (f"{fmt(meas):>{w_col}}", "$kvtop-measured"), (f"{rtxt:>8}", style)))
        lines.append(Content.styled(verdict(self.rows, self.context), "italic"))
        if self.note:
            lines.append(Content.styled(self.note, "$text-muted"))
        return Content("\n").join(lines)
