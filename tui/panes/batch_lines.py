"""The server pane's lines for a server that batches without slots (``BatchView``,
runner/server/batch_view.py): requests running and waiting, the KV pool, the prefix
cache, preemptions and latency percentiles, and what the server does not publish."""

from __future__ import annotations

from textual.content import Content

from kvtop.runner.units import fmt_int
from kvtop.tui.base.format import fmt_bytes

NAMES = {"ttft": "TTFT", "itl": "ITL", "queue": "queue"}


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:,.0f} ms" if s < 10 else f"{s:,.1f} s"


def batch_lines(b) -> list[Content]:
    out = [Content.assemble(("running ", "$text-muted"), fmt_int(b.running), ("  waiting ", "$text-muted"),
                            (fmt_int(b.waiting), "bold $kvtop-critical" if b.waiting else ""))]
    if b.kv_usage is None:
        out.append(Content.styled("KV: not published", "$text-muted"))
    else:
        used = b.kv_used_bytes
        size = f" of {fmt_int(b.kv_tokens)} tok" if b.kv_tokens else ""
        out.append(Content.assemble(("KV ", "$text-muted"), (f"{b.kv_usage:.0%}", "bold"), size,
                                    f" ({fmt_bytes(used)} / {fmt_bytes(b.kv_pool_bytes)})" if used is not None else ""))
        if b.block_size:
            out.append(Content.styled(f"blocks of {fmt_int(b.block_size)} tok; bytes from {b.kv_bytes_from}",
                                      "$text-muted"))
    rate = b.prefix_hit_rate if b.prefix_hit_rate is not None else b.prefix_hit_rate_total
    since = "last minute" if b.prefix_hit_rate is not None else "since start"
    out.append(Content.assemble(("prefix-cache hits ", "$text-muted"),
                                f"{rate:.0%} ({since})" if rate is not None else "no queries yet"))
    pre = "-" if b.preemptions is None else fmt_int(b.preemptions)
    out.append(Content.assemble(("preemptions ", "$text-muted"),
                                (pre, "bold $kvtop-warn" if b.preempted_now else ""),
                                f" (+{fmt_int(b.preempted_now)} now)" if b.preempted_now else ""))
    for key, name in NAMES.items():
        p = b.percentiles.get(key)
        if p is None:
            out.append(Content.styled(f"{name}: no request in the window", "$text-muted"))
        else:
            out.append(Content.assemble((f"{name} p50 ", "$text-muted"), _ms(p.p50), ("  p95 ", "$text-muted"),
                                        _ms(p.p95), ("  p99 ", "$text-muted"), _ms(p.p99),
                                        (f"  ({fmt_int(p.n)} in the last minute)", "$text-muted")))
    if b.not_published:
        out.append(Content.styled(f"not published by this server: {', '.join(b.not_published)}", "$text-muted"))
    return out


def fmt_flop(x: float) -> str:
    for scale, unit in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")):
        if x >= scale:
            return f"{x / scale:,.1f} {unit}" if x < 100 * scale else f"{x / scale:,.0f} {unit}"
    return f"{x:,.0f} FLOP"


def _off(x: float | None) -> tuple[str, str]:
    if x is None:
        return "", ""
    return f" ({x:+.0%})", "bold $kvtop-critical" if abs(x) > 0.10 else "$text-muted"


def perf_lines(p) -> list[Content]:
    """kvtop's FLOPs and bytes per token beside vLLM's own estimates
    (runner.physics.batch_roof.PerfCheck), or the line saying vLLM does not count them."""
    if isinstance(p, str):
        return [Content.styled(p, "$text-muted")]
    out = [Content.assemble(("FLOPs/token kvtop ", "$text-muted"), fmt_flop(p.kvtop_flops_per_token),
                            ("  vLLM ", "$text-muted"), fmt_flop(p.vllm_flops_per_token), _off(p.flops_off))]
    if p.kvtop_bytes_per_token is not None:
        out.append(Content.assemble(("bytes/gen token kvtop ", "$text-muted"), fmt_bytes(p.kvtop_bytes_per_token),
                                    ("  vLLM ", "$text-muted"), fmt_bytes(p.vllm_bytes_per_token), _off(p.bytes_off)))
    if p.disagrees:
        out.append(Content.styled(f"kvtop and vLLM disagree by over 10% ({p.requests} request{'s' if p.requests != 1 else ''}, "
                                  "last minute)",
                                  "bold $kvtop-critical"))
    return out
