"""Every plain-language verdict kvtop shows, from measured figures (pure functions).

* ``estimate_verdict``: the Estimate pane's line, the likely reason for the biggest
  gap between the estimate and a measured turn.
* ``ttft_verdict``: the TTFT waterfall's line (F2), the biggest cause of one turn's
  time to first token.

Rules the estimate verdict keeps:

* it names the biggest gap first (the gaps compared as factors either way: 2x slower
  and 2x faster are as far off), then its cause;
* "faster than predicted" when the measurement beat the estimate, never a reason for
  being slow;
* a TTFT gap is split into what the estimate leaves out (waiting for the engine: a
  model load or a previous turn), prefill beyond its prediction, and the rest, and
  the biggest part is named;
* decode is judged by its median token gap; stalls that pulled the mean down are
  named with their total time, not read as per-token cost;
* a second gap outside 25% that the first sentence does not explain follows it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kvtop.runner.physics.estimate_rows import EstimateContext, EstimateRows, TurnFigures
from kvtop.runner.policy.tune_evidence import TuneEvidence, advise, roofline_gap
from kvtop.runner.system.cpu_pace import free_cores
from kvtop.runner.units import MIB, fmt_seconds
from kvtop.runner.units import fmt_size as fmt_bytes  # the panes' one form for bytes

if TYPE_CHECKING:
    from kvtop.runner.events import ContextShifted, TurnMetrics

TOLERANCE = 1.25  # within 25% either way: "near the hardware's limits"
BUSY_SHARE = 0.25  # other processes took at least a quarter of the CPU: named before the model
SHORT_PROMPT_TOKENS = 64  # below this the matmuls are too thin to keep the units busy
SMALL_UBATCH = 128
TINY_MODEL_BYTES = 512 * MIB  # per-token overhead, not weight reads, bounds decode
PACKED_DECODE_GAP = 10.0  # decode this many times under its ceiling with threads packed: named as the cause
STALL_SHARE = 0.2  # stalls named when they are at least this share of decode time ...
STALL_MIN_S = 0.1  # ... and at least this long

_KEYS = ("ttft", "prefill", "decode")
GPU_IDLE = "all layers run on the CPU although a GPU is present"


def gpu_idle(tuned: TuneEvidence | None) -> str:
    """The idle GPU, with ``-ngl 99`` advised with its evidence (not where tune measured it no faster)."""
    advice = advise("-ngl 99", tuned)
    return f"{GPU_IDLE}: {advice}" if advice else GPU_IDLE


# ---------------------------------------------------------------- estimate verdict
def _slowdown(key: str, ratio: float) -> float:
    """> 1: the measurement is worse than predicted (a longer TTFT, a lower rate)."""
    return ratio if key == "ttft" else 1.0 / ratio


def _far(slowdown: float) -> bool:
    return abs(math.log(slowdown)) >= math.log(TOLERANCE)


def _phrase(key: str, ratio: float) -> str:
    """The gap as the pane's table shows it: measured / predicted."""
    text = {
        "ttft": f"TTFT at {ratio:.2f}x the roofline",
        "prefill": f"prefill at {ratio:.2f}x of the roofline",
        "decode": f"decode at {ratio:.2f}x of the ceiling",
    }[key]
    if _slowdown(key, ratio) < 1 and round(ratio, 2) != 1:
        text += ", faster than predicted"
    return text


def _prefill_slow_cause(n_tokens: int | None, ctx: EstimateContext) -> str:
    if ctx.gpu_idle:
        return gpu_idle(ctx.tuned)
    gap = roofline_gap(ctx.tuned, "prefill")
    if gap:  # a setting the roofline does not see, measured here
        return gap
    if n_tokens is not None and n_tokens < SHORT_PROMPT_TOKENS:
        return f"a {n_tokens}-token prompt pays per-step costs (graph, threads, sampling) the roofline does not count"
    if ctx.n_ubatch < SMALL_UBATCH and (advice := advise(f"-ub {2 * ctx.n_ubatch}", ctx.tuned)):
        return f"ubatch {ctx.n_ubatch} is too small: {advice}"  # not where kvtop tune measured it no faster
    if ctx.on_cpu:
        return "the whole model runs below the fastest matmul kernel the probe timed (attention, norms and other weight types are slower)"
    return "compute not saturated"


def _prefill_fast_cause(ctx: EstimateContext) -> str:
    if ctx.on_cpu:
        return "llama.cpp beat the matmul kernels the probe timed (repacked weights, or a probe taken while the CPU was busy)"
    return "the device reaches more than the FLOPS figure the estimate uses"


def _decode_slow_cause(ms_per_token: float | None, ctx: EstimateContext) -> str:
    if ctx.gpu_idle:
        return gpu_idle(ctx.tuned)
    gap = roofline_gap(ctx.tuned, "decode")
    if gap:  # flash attention reads the same bytes, yet changed decode here
        return gap
    if ctx.kv_quantised:
        return f"quantised KV ({ctx.kv_types}) adds dequantisation work"
    w = ctx.weights_bytes
    if w and w < TINY_MODEL_BYTES:
        per = f" ({ms_per_token:.1f} ms/token)" if ms_per_token else ""
        return f"a tiny model ({fmt_bytes(w)}) is bound by per-token overhead{per}, not by reading the weights"
    return "memory bandwidth not saturated (threads? other load?)"


def _decode_fast_cause(ctx: EstimateContext) -> str:
    w = ctx.weights_bytes
    if ctx.on_cpu and w and w < TINY_MODEL_BYTES:
        return f"part of a small model ({fmt_bytes(w)}) stays in the CPU caches"
    return "the machine reads faster than the bandwidth figure the estimate uses"


def decode_stalls(turn: TurnFigures | None) -> tuple[float, int] | None:
    """(seconds the decode took beyond its median pace, token gaps) when that is a
    stall worth naming, else None. The mean rate counts a 1.3 s stall as if every
    token had been slow; the median does not."""
    if turn is None or not turn.itl_p50_ms or not turn.decode_s or not turn.decode_tok_s:
        return None
    gaps = round(turn.decode_tok_s * turn.decode_s)
    if gaps < 2:
        return None
    extra = turn.decode_s - gaps * turn.itl_p50_ms / 1000
    if extra >= STALL_MIN_S and extra >= STALL_SHARE * turn.decode_s:
        return extra, gaps
    return None


def _decode_sentence(rows: EstimateRows, ratio: float) -> str:
    """``ratio``: the decode row's (known: the verdict picked decode by it)."""
    row, ctx, turn = rows.decode, rows.context, rows.turn
    head = _phrase("decode", ratio)
    p50 = turn.itl_p50_ms if turn else None
    if turn is not None and turn.spec_tokens_per_pass and ratio > 1:  # the ceiling is one token a pass
        return f"{head}: speculation made {turn.spec_tokens_per_pass:.1f} tokens a pass of the weights"
    if ratio > 1:
        return f"{head}: {_decode_fast_cause(ctx)}"
    stalls = decode_stalls(turn)
    # a stall needs the turn's p50, pace and decode time (decode_stalls checked them); the ratio, a prediction
    if stalls is None or turn is None or not (p50 and turn.decode_tok_s and turn.decode_s) or not row.predicted:
        return f"{head}: {_decode_slow_cause(p50, ctx)}"
    extra, gaps = stalls
    mean_ms = 1000 / turn.decode_tok_s
    p95 = f", p95 {turn.itl_p95_ms:.1f} ms" if turn.itl_p95_ms else ""
    head += (f": stalls took {fmt_seconds(extra)} of {fmt_seconds(turn.decode_s)} "
             f"(mean gap {mean_ms:.1f} ms, median {p50:.1f} ms{p95})")
    median_ratio = (1000 / p50) / row.predicted
    if not _far(1 / median_ratio):
        return f"{head}; between them {median_ratio:.2f}x, near the ceiling: another process or swapping?"
    if median_ratio > 1:
        return f"{head}; between them {median_ratio:.2f}x, faster than predicted: {_decode_fast_cause(ctx)}"
    return f"{head}; by the median {median_ratio:.2f}x: {_decode_slow_cause(p50, ctx)}"


def _prefill_seconds(rows: EstimateRows) -> tuple[float | None, float | None, int | None]:
    """(measured, predicted) prefill seconds of the turn and its computed tokens."""
    n = rows.turn.prefill_tokens if rows.turn else None
    pred_rate, meas_rate = rows.prefill.predicted, rows.prefill.measured
    meas = rows.turn.prefill_s if rows.turn and rows.turn.prefill_s is not None else None
    if meas is None and n and meas_rate:
        meas = n / meas_rate
    pred = n / pred_rate if n and pred_rate else None
    return meas, pred, n


def _ttft_sentence(rows: EstimateRows, ratio: float) -> tuple[str, set[str]]:
    """The TTFT gap and its biggest part; also which other gaps it explains (``ratio``:
    the TTFT row's, known, so both of its figures are)."""
    row, ctx = rows.ttft, rows.context
    head = _phrase("ttft", ratio)
    pf_meas, pf_pred, n = _prefill_seconds(rows)
    pf_ratio = rows.prefill.ratio
    if ratio < 1:  # faster: only prefill can be (the rest is measured, not predicted)
        if pf_ratio is not None and pf_ratio > 1:
            return f"{head}: prefill ran at {pf_ratio:.2f}x the predicted rate, {_prefill_fast_cause(ctx)}", {"prefill"}
        return head, set()
    excess = (row.measured or 0.0) - (row.predicted or 0.0)  # both are known (the ratio is)
    wait = rows.turn.wait_s if rows.turn and rows.turn.wait_s else 0.0
    pf_excess = pf_meas - pf_pred if pf_meas is not None and pf_pred is not None else 0.0
    rest = excess - wait - pf_excess
    biggest = max((wait, "wait"), (pf_excess, "prefill"), (rest, "rest"))[1]
    if biggest == "wait":
        return (f"{head}, mostly waiting for the engine ({fmt_seconds(wait)} of {fmt_seconds(row.measured)}: "
                f"model load or a previous turn)"), set()
    if biggest == "prefill":
        return (f"{head}, mostly prefill ({fmt_seconds(pf_meas)}, predicted {fmt_seconds(pf_pred)}): "
                f"{_prefill_slow_cause(n, ctx)}"), {"prefill"}
    return (f"{head}, mostly outside prefill ({fmt_seconds(rest)}: cache lookup, first sample, "
            f"first visible character)"), set()


def estimate_verdict(rows: EstimateRows) -> str:
    """One line: the biggest gap between estimate and measurement, and its likely reason."""
    ratios = {k: r for k in _KEYS if (r := rows.row(k).ratio) is not None}
    gaps = {k: _slowdown(k, r) for k, r in ratios.items()}
    if not gaps:
        return "send a message to compare the estimate with a measured turn"
    busy = rows.context.others_cpu
    if busy is not None and busy >= BUSY_SHARE and any(g > TOLERANCE for g in gaps.values()):
        # the machine was not kvtop's: that comes before anything about the model
        head = f"other processes used {busy:.0%} of the CPU during this turn; "
        ctx = rows.context
        if ctx.engine_threads:  # kvtop ran it on the free cores (runner.calibration.load.turn_threads)
            head = (f"other processes used {busy:.0%} of the CPU during this turn, so it ran on "
                    f"{ctx.threads} of kvtop's {ctx.engine_threads} threads; ")
        advice = packed_threads(rows.context)
        if advice and gaps.get("decode", 1.0) >= PACKED_DECODE_GAP:
            return head + f"{_phrase('decode', ratios['decode'])}: {advice}"
        return head + _verdict(rows, ratios, gaps)
    return _verdict(rows, ratios, gaps)


def packed_threads(ctx: EstimateContext) -> str:
    """Advice when the engine has more threads than the cores other processes leave free
    (``""`` otherwise). llama.cpp's threads meet at a barrier after every op; Linux
    shares the CPU between sessions first (autogroup), so an engine whose threads
    outnumber the free cores gets them packed onto the same core, where each op waits
    for a time slice. Measured here (2 cores, one busy process in another session):
    SmolLM2 decoded 0.90 tok/s with -t 2 and 45.6 with -t 1 (71.5 and 49.1 quiet)."""
    return packed_advice(ctx.threads, ctx.n_cores, ctx.others_cpu, ctx.on_cpu, ctx.tuned)


def packed_advice(threads: int, n_cores: int, others_cpu: float | None, on_cpu: bool = True,
                  tuned: TuneEvidence | None = None) -> str:
    """``packed_threads`` from its figures: the turn's threads, the machine's cores, the
    others' share of the CPU (0..1) during the turn, whether the model runs on the CPU."""
    if not (on_cpu and threads > 1 and n_cores > 0 and others_cpu is not None):
        return ""
    held = others_cpu * n_cores
    free = free_cores(held, n_cores)
    if threads <= free:
        return ""
    return (f"llama.cpp's {threads} threads wait for each other after every op and other processes "
            f"hold {held:.1f} of {n_cores} cores, so threads share a core: "
            f"{advise(f'-t {free}', tuned, conditional=True)}")


def _verdict(rows: EstimateRows, ratios: dict[str, float], gaps: dict[str, float]) -> str:
    order = sorted(gaps, key=lambda k: abs(math.log(gaps[k])), reverse=True)
    worst = order[0]
    ctx = rows.context
    if not _far(gaps[worst]):
        line = f"measured within 25% of the roofline ({_phrase(worst, ratios[worst])}): running near the hardware's limits"
        if ctx.gpu_idle:
            line += "; " + gpu_idle(ctx.tuned)
        return line
    explained: set[str] = {worst}
    if worst == "ttft":
        line, more = _ttft_sentence(rows, ratios[worst])
        explained |= more
    elif worst == "prefill":
        r = ratios["prefill"]
        n = rows.turn.prefill_tokens if rows.turn else None
        cause = _prefill_fast_cause(ctx) if r > 1 else _prefill_slow_cause(n, ctx)
        line = f"{_phrase('prefill', r)}: {cause}"
    else:
        line = _decode_sentence(rows, ratios[worst])
    also = next((k for k in order[1:] if k not in explained and _far(gaps[k])), None)
    if also is not None:
        line += f"; also {_phrase(also, ratios[also])}"
    return line


# ------------------------------------------------------------------- TTFT verdict
def ttft_verdict(metrics: TurnMetrics, first_diff_index: int | None = None,
                 diff_context: tuple[str, str] | None = None, others_cpu: float | None = None,
                 shift: ContextShifted | None = None, cpu: tuple[int, int, bool] | None = None,
                 tuned: TuneEvidence | None = None) -> str:
    """One sentence naming the biggest cause of this turn's time to first token; other
    processes holding the CPU come first, as in the Estimate pane's verdict. ``shift``:
    the turn's ``ContextShifted`` (a full context dropped its oldest turns). ``cpu``:
    (the engine's prefill threads, the machine's cores, whether the model runs on the
    CPU), so threads packed onto a shared core are named as the Estimate pane names them
    (None: not known, as through a server)."""
    ttft = metrics.ttft_s
    if not ttft or not metrics.timeline:
        return "no first token was produced in this turn"
    busy = others_cpu is not None and others_cpu >= BUSY_SHARE
    line = _shift_cause(metrics, ttft, shift) or _ttft_cause(metrics, ttft, first_diff_index, diff_context, busy)
    if busy:
        head, packed = f"other processes used {others_cpu:.0%} of the CPU during this turn; ", ""
        if cpu is not None:  # the threads the turn ran on, where recorded
            threads, n_cores, on_cpu = cpu
            ran = getattr(metrics, "n_threads_batch", 0) or threads
            packed = packed_advice(ran, n_cores, others_cpu, on_cpu, tuned)
            if ran < threads:  # kvtop ran it on the free cores, as the Estimate pane says
                head = (f"other processes used {others_cpu:.0%} of the CPU during this turn, so it ran on "
                        f"{ran} of kvtop's {threads} threads; ")
        return head + line + (f"; {packed}" if packed else "")
    return line


def _shift_cause(metrics: TurnMetrics, ttft: float, shift: ContextShifted | None) -> str | None:
    """A prefill that a context shift made long: the dropped turns broke the cached prefix."""
    prefill = sum(dt for _, dt in metrics.ubatches)
    if shift is None or shift.prefix_broken_at is None or prefill < 0.5 * ttft:
        return None
    from kvtop.runner.policy.context_shift import turn_ranges

    n = len(shift.dropped_turns)
    rate = metrics.prefill_tokens / prefill if prefill else 0
    return (f"context full: turn{'' if n == 1 else 's'} {turn_ranges(shift.dropped_turns)} "
            f"{'was' if n == 1 else 'were'} dropped, so the cached prefix broke at token "
            f"{shift.prefix_broken_at:,} and {metrics.prefill_tokens:,} of {metrics.prompt_tokens:,} prompt tokens "
            f"were recomputed: {fmt_seconds(prefill)} of {fmt_seconds(ttft)} at {rate:,.0f} tok/s")


def _ttft_cause(metrics: TurnMetrics, ttft: float, first_diff_index: int | None,
                diff_context: tuple[str, str] | None, busy: bool = False) -> str:
    _s = fmt_seconds
    prefill = sum(dt for _, dt in metrics.ubatches)
    segs = {label: dt for label, _start, dt in metrics.timeline}
    wait = segs.get("wait for engine", 0.0)
    template = segs.get("template", 0.0)
    if prefill >= 0.5 * ttft:
        recomputed = metrics.prefill_tokens
        rate = recomputed / prefill if prefill else 0
        if first_diff_index is not None:  # the cache held more, and the prompt parted from it
            where = f" (cached …{diff_context[0][-24:]!r} vs new …{diff_context[1][-24:]!r})" if diff_context else ""
            line = (f"prompt of {metrics.prompt_tokens:,} tokens, {recomputed:,} recomputed: the prompt differs "
                    f"from the cached one at token {first_diff_index:,}{where}; an unchanged prefix is reused")
            if recomputed > metrics.prompt_tokens // 2:
                return line
            return line + f" ({_s(prefill)} of {_s(ttft)} is that prefill, at {rate:,.0f} tok/s)"
        # beside other processes' work the prefill is slowed by them, not bound by compute
        return (f"{'' if busy else 'compute-bound: '}{_s(prefill)} of {_s(ttft)} is prefill of {recomputed:,} "
                f"tokens at {rate:,.0f} tok/s ({metrics.reused_tokens:,} reused from the cache)")
    if wait >= 0.5 * ttft:
        return f"queued: {_s(wait)} of {_s(ttft)} waiting for the engine (model load or a previous turn)"
    if template >= 0.3 * ttft:
        return f"template rendering took {_s(template)} of {_s(ttft)}"
    biggest = max(metrics.timeline, key=lambda seg: seg[2])
    return f"{biggest[0]} is the largest part: {_s(biggest[2])} of {_s(ttft)}"
