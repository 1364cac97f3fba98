"""The Estimate pane's rows as typed data, the same figures the app built by hand."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
from helpers import FIXED_HW

from kvtop.runner.events import TurnMetrics
from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.estimate_rows import EstimateContext, EstimateRows, Row, TurnFigures, estimate_rows
from kvtop.runner.physics.kv_bytes import kv_layout
from kvtop.runner.physics.roofline import predict
from kvtop.runner.settings import Settings, usable_cores
from kvtop.runner.units import MIB

BUFFERS = SimpleNamespace(kv_mib=90.0, weights_mib=92.1, compute_total_mib=98.63)


def turn(**kw) -> TurnMetrics:
    base = dict(prompt_tokens=37, reused_tokens=0, prefill_tokens=37, prefill_s=0.088, prefill_tok_s=420.0,
                template_s=0.002, tokenize_s=0.0005, wait_s=0.0, ttft_s=0.098, decode_tokens=30, decode_s=0.193,
                decode_tok_s=150.0, itl_p50_ms=6.67, itl_p95_ms=6.67, kv_cells_used=66, n_ctx=4096)
    base.update(kw)
    return TurnMetrics(**base)


def the_apps_former_dicts(f, lay, hw, s, buffers, peak_rss, mt, ran):
    """What ``KvtopApp._update_estimate`` built before: rows, ctx, note."""
    rows = {"kv": (lay.bytes_allocated, buffers.kv_mib * MIB if buffers else None),
            "weights": (f.weights_bytes, buffers.weights_mib * MIB if buffers else None)}
    peak_pred = None
    if f.weights_bytes is not None:
        peak_pred = f.weights_bytes + lay.bytes_allocated + (buffers.compute_total_mib * MIB if buffers else 0)
    rows["peak"] = (peak_pred, peak_rss if (mt is not None or ran) else None)
    ctx = {"gpu_present": bool(hw.gpus), "n_gpu_layers": s.n_gpu_layers, "n_ubatch": s.n_ubatch,
           "on_cpu": not (hw.gpus and s.n_gpu_layers),
           "kv_quantised": s.cache_type_k not in ("f16", "f32", "bf16") or s.cache_type_v not in ("f16", "f32", "bf16"),
           "kv_types": f"{s.cache_type_k}/{s.cache_type_v}", "weights_bytes": f.weights_bytes}
    if mt is not None:
        p = predict(f, lay, hw.bandwidth_gbs, hw.tflops, prompt_tokens=max(mt.prefill_tokens, 1),
                    output_tokens=mt.decode_tokens, reused_tokens=mt.reused_tokens)
        rows["ttft"] = ((p.prefill_s or 0) + mt.template_s + mt.tokenize_s if p.prefill_s is not None else None,
                        mt.ttft_s)
        rows["prefill"] = (p.prefill_tok_s, mt.prefill_tok_s)
        rows["decode"] = (min(x for x in (p.decode_ceiling_tok_s, p.compute_ceiling_tok_s) if x is not None)
                          if (p.decode_ceiling_tok_s or p.compute_ceiling_tok_s) else None, mt.decode_tok_s)
        ctx["prompt_tokens"] = mt.prefill_tokens
    return rows, ctx, f"hardware: {hw.bandwidth_gbs:.1f} GB/s, {hw.tflops:.3g} TFLOPS · {hw.source}"


@pytest.fixture(scope="module")
def smollm(smollm_path):
    facts = load_facts(smollm_path)
    return facts, kv_layout(facts, 4096)


@pytest.mark.parametrize("case", ["inspected", "loaded", "after a turn", "later, no new turn", "q8 cache"])
def test_the_same_rows_as_the_app_built(smollm, case):
    facts, lay = smollm
    s = Settings("m.gguf", n_ctx=4096, n_threads=2)
    buffers, mt, ran = BUFFERS, None, False
    if case == "inspected":
        buffers = None
    elif case == "after a turn":
        mt = turn()
    elif case == "later, no new turn":
        ran = True
    elif case == "q8 cache":
        s, mt = replace(s, cache_type_k="q8_0"), turn()
    got = estimate_rows(facts, lay, FIXED_HW, s, buffers=buffers, peak_rss=251 * MIB, turn=mt, turn_ran=ran)
    want = rows_from_dicts(*the_apps_former_dicts(facts, lay, FIXED_HW, s, buffers, 251 * MIB, mt, ran))
    for key in EstimateRows.KEYS:
        assert got.row(key) == want.row(key), key
    # the threads and cores are new since the former dicts (the packed-threads verdict needs them)
    assert got.context.threads == 2 and got.context.n_cores == usable_cores()  # FIXED_HW has no probe
    assert replace(got.context, threads=0, n_cores=0) == want.context and got.note == want.note == "hardware: 30.0 GB/s, 0.25 TFLOPS · test profile"
    if mt is not None:
        assert got.turn == TurnFigures.from_metrics(mt) and got.turn.prefill_tokens == want.turn.prefill_tokens


def test_the_predicted_decode_rate_is_the_binding_ceiling(smollm):
    facts, lay = smollm
    got = estimate_rows(facts, lay, FIXED_HW, Settings("m.gguf"), turn=turn())
    p = predict(facts, lay, FIXED_HW.bandwidth_gbs, FIXED_HW.tflops, 37, 30)
    assert got.decode.predicted == p.decode_tok_s == min(p.decode_ceiling_tok_s, p.compute_ceiling_tok_s)


def test_peak_is_compared_only_once_a_turn_ran(smollm):
    facts, lay = smollm
    at_load = estimate_rows(facts, lay, FIXED_HW, Settings("m.gguf"), buffers=BUFFERS, peak_rss=26 * MIB)
    assert at_load.peak.measured is None and at_load.peak.predicted is not None
    assert at_load.ttft == at_load.prefill == at_load.decode == Row() and at_load.turn is None


def test_row_ratio():
    assert Row(2.0, 3.0).ratio == 1.5
    for r in (Row(), Row(1.0, None), Row(None, 1.0), Row(0.0, 1.0), Row(1.0, 0.0), Row(float("nan"), 1.0)):
        assert r.ratio is None


def test_the_context_knows_where_layers_run():
    assert EstimateContext().on_cpu and not EstimateContext().gpu_idle
    assert EstimateContext(gpu_present=True).gpu_idle
    gpu = EstimateContext(gpu_present=True, n_gpu_layers=99)
    assert not gpu.on_cpu and not gpu.gpu_idle


def rows_from_dicts(rows: dict, ctx: dict, note: str = "") -> EstimateRows:
    """The form the app built before estimate_rows existed, as EstimateRows: the reference."""
    kw = {k: Row(*rows[k]) for k in EstimateRows.KEYS if k in rows}
    context = EstimateContext(
        gpu_present=bool(ctx.get("gpu_present")), n_gpu_layers=ctx.get("n_gpu_layers", 0),
        n_ubatch=ctx.get("n_ubatch", 512), kv_types=ctx.get("kv_types", "f16/f16"),
        kv_quantised=bool(ctx.get("kv_quantised")), weights_bytes=ctx.get("weights_bytes"))
    turn = TurnFigures(prefill_tokens=ctx["prompt_tokens"]) if "prompt_tokens" in ctx else None
    return EstimateRows(**kw, context=context, turn=turn, note=note)
