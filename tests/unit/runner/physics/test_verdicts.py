"""Every branch of every verdict, with the numbers that trigger it.

The estimate verdict names the biggest gap first, says "faster than predicted" when
the measurement beat the estimate, splits a TTFT gap into its parts (a model-load
wait is not prefill), and judges decode by its median token gap with stalls named.
"""

from types import SimpleNamespace

import pytest

from kvtop.runner.physics.estimate_rows import EstimateContext, EstimateRows, Row, TurnFigures
from kvtop.runner.physics.verdicts import decode_stalls, estimate_verdict, gpu_idle, ttft_verdict
from kvtop.runner.units import GIB, MIB

CPU_TINY = EstimateContext(weights_bytes=92 * MIB)  # SmolLM2-135M on a CPU
CPU_BIG = EstimateContext(weights_bytes=4 * GIB)
GPU = EstimateContext(gpu_present=True, n_gpu_layers=99, weights_bytes=4 * GIB)
GPU_UNUSED = EstimateContext(gpu_present=True, n_gpu_layers=0, weights_bytes=4 * GIB)


def rows(ctx=CPU_BIG, turn=None, **pairs) -> EstimateRows:
    return EstimateRows(context=ctx, turn=turn, **{k: Row(*v) for k, v in pairs.items()})


def steady(tok_s: float, n: int = 50) -> TurnFigures:
    """A decode with every token gap the same: median == mean."""
    gap_ms = 1000 / tok_s
    return TurnFigures(prefill_tokens=512, decode_tokens=n, decode_s=(n - 1) * gap_ms / 1000,
                       decode_tok_s=tok_s, itl_p50_ms=gap_ms, itl_p95_ms=gap_ms)


def stalled(median_ms: float, stall_s: float, n: int = 20, p95_ms: float = 80.0) -> TurnFigures:
    """n tokens, n-1 gaps: all at the median but one stall of ``stall_s``."""
    decode_s = (n - 2) * median_ms / 1000 + stall_s
    return TurnFigures(prefill_tokens=512, decode_tokens=n, decode_s=decode_s, decode_tok_s=(n - 1) / decode_s,
                       itl_p50_ms=median_ms, itl_p95_ms=p95_ms)


# ------------------------------------------------------------------ nothing to compare
def test_before_any_turn():
    assert estimate_verdict(EstimateRows()) == "send a message to compare the estimate with a measured turn"
    # KV and weight rows alone are no verdict on speed
    assert estimate_verdict(rows(kv=(90 * MIB, 90 * MIB))).startswith("send a message")


# ------------------------------------------------------------------ within 25%
def test_within_25_percent_names_the_biggest_gap():
    v = estimate_verdict(rows(ttft=(0.1, 0.11), prefill=(500, 450), decode=(100, 82)))
    assert v == ("measured within 25% of the roofline (decode at 0.82x of the ceiling): "
                 "running near the hardware's limits")


def test_within_25_percent_and_faster_says_so():
    v = estimate_verdict(rows(prefill=(500, 600), decode=(100, 98)))
    assert v.startswith("measured within 25% of the roofline (prefill at 1.20x of the roofline, faster than predicted)")


def test_within_25_percent_with_an_unused_gpu_suggests_ngl():
    v = estimate_verdict(rows(GPU_UNUSED, decode=(100, 95)))
    assert v.startswith("measured within 25%") and v.endswith("; " + gpu_idle(None))


# ------------------------------------------------------------------ TTFT
def test_ttft_gap_from_a_model_load_wait_is_named_not_blamed_on_the_prompt():
    """The issue's case: TTFT 3.44x, 481 ms of it waiting for the model to load, while
    prefill itself ran 1.44x faster than predicted on a 16-token prompt."""
    turn = TurnFigures(prefill_tokens=16, prefill_s=16 / 432, wait_s=0.481)
    v = estimate_verdict(rows(CPU_TINY, turn, ttft=(0.18, 0.62), prefill=(300, 432), decode=(150, 140)))
    assert v.startswith("TTFT at 3.44x the roofline, mostly waiting for the engine (481 ms of 620 ms")
    assert v.endswith("; also prefill at 1.44x of the roofline, faster than predicted")
    assert "too short" not in v


def test_ttft_gap_from_slow_prefill_names_prefill_and_why():
    """The snapshot's turn: a 37-token prompt at 420 tok/s against 925 predicted."""
    v = estimate_verdict(rows(CPU_TINY, TurnFigures(prefill_tokens=37), ttft=(0.043, 0.098),
                              prefill=(925, 420), decode=(307, 150)))
    assert v == ("TTFT at 2.28x the roofline, mostly prefill (88 ms, predicted 40 ms): a 37-token prompt pays "
                 "per-step costs (graph, threads, sampling) the roofline does not count; also decode at 0.49x of "
                 "the ceiling")


def test_ttft_gap_outside_prefill():
    turn = TurnFigures(prefill_tokens=512, prefill_s=0.1, wait_s=0.0)
    v = estimate_verdict(rows(CPU_BIG, turn, ttft=(0.1, 0.3), prefill=(5120, 5120)))
    assert v == ("TTFT at 3.00x the roofline, mostly outside prefill (200 ms: cache lookup, first sample, "
                 "first visible character)")


def test_ttft_faster_than_predicted_because_prefill_was():
    turn = TurnFigures(prefill_tokens=512, prefill_s=0.05)
    v = estimate_verdict(rows(CPU_BIG, turn, ttft=(0.1, 0.05), prefill=(5120, 10240)))
    assert v == ("TTFT at 0.50x the roofline, faster than predicted: prefill ran at 2.00x the predicted rate, "
                 "llama.cpp beat the matmul kernels the probe timed (repacked weights, or a probe taken while the CPU was busy)")


def test_ttft_faster_without_a_prefill_row():
    assert estimate_verdict(rows(ttft=(0.1, 0.05))) == "TTFT at 0.50x the roofline, faster than predicted"


# ------------------------------------------------------------------ prefill
@pytest.mark.parametrize("ctx,tokens,cause", [
    (CPU_BIG, 16, "a 16-token prompt pays per-step costs (graph, threads, sampling) the roofline does not count"),
    (EstimateContext(n_ubatch=64, weights_bytes=4 * GIB), 512,
     "ubatch 64 is too small: try -ub 128 (not measured: `kvtop tune` measures it)"),
    (CPU_BIG, 512, "the whole model runs below the fastest matmul kernel the probe timed (attention, norms and other weight types are slower)"),
    (GPU, 512, "compute not saturated"),
    (GPU_UNUSED, 512, gpu_idle(None)),
])
def test_prefill_slower_than_predicted(ctx, tokens, cause):
    v = estimate_verdict(rows(ctx, TurnFigures(prefill_tokens=tokens), prefill=(1000, 450)))
    assert v == f"prefill at 0.45x of the roofline: {cause}"


@pytest.mark.parametrize("ctx,cause", [
    (CPU_BIG, "llama.cpp beat the matmul kernels the probe timed (repacked weights, or a probe taken while the CPU was busy)"),
    (GPU, "the device reaches more than the FLOPS figure the estimate uses"),
])
def test_prefill_faster_than_predicted_is_never_called_too_short(ctx, cause):
    v = estimate_verdict(rows(ctx, TurnFigures(prefill_tokens=16), prefill=(300, 432)))
    assert v == f"prefill at 1.44x of the roofline, faster than predicted: {cause}"


# ------------------------------------------------------------------ decode
@pytest.mark.parametrize("ctx,cause", [
    (EstimateContext(kv_quantised=True, kv_types="q8_0/q8_0", weights_bytes=4 * GIB),
     "quantised KV (q8_0/q8_0) adds dequantisation work"),
    (CPU_TINY, "a tiny model (92.0 MiB) is bound by per-token overhead (20.0 ms/token), not by reading the weights"),
    (CPU_BIG, "memory bandwidth not saturated (threads? other load?)"),
    (GPU_UNUSED, gpu_idle(None)),
])
def test_decode_slower_than_predicted(ctx, cause):
    v = estimate_verdict(rows(ctx, steady(50.0), decode=(100, 50)))
    assert v == f"decode at 0.50x of the ceiling: {cause}"


@pytest.mark.parametrize("ctx,cause", [
    (CPU_TINY, "part of a small model (92.0 MiB) stays in the CPU caches"),
    (CPU_BIG, "the machine reads faster than the bandwidth figure the estimate uses"),
])
def test_decode_faster_than_predicted(ctx, cause):
    v = estimate_verdict(rows(ctx, steady(150.0), decode=(100, 150)))
    assert v == f"decode at 1.50x of the ceiling, faster than predicted: {cause}"


def test_decode_stall_is_named_and_the_median_judges_the_rest():
    """The issue's case: a 17 ms median gap, one 1.3 s stall making an 84 ms mean; it is
    not 'per-token overhead of 84 ms/token'."""
    turn = stalled(17.0, 1.3)
    v = estimate_verdict(rows(CPU_TINY, turn, decode=(100, turn.decode_tok_s)))
    assert v == ("decode at 0.12x of the ceiling: stalls took 1.28 s of 1.61 s (mean gap 84.5 ms, median 17.0 ms, "
                 "p95 80.0 ms); by the median 0.59x: a tiny model (92.0 MiB) is bound by per-token overhead "
                 "(17.0 ms/token), not by reading the weights")
    assert "84.5 ms/token" not in v


def test_decode_stall_with_the_median_near_the_ceiling():
    turn = stalled(10.2, 1.0)
    v = estimate_verdict(rows(CPU_BIG, turn, decode=(100, turn.decode_tok_s)))
    assert v.startswith("decode at 0.16x of the ceiling: stalls took 990 ms of 1.18 s")
    assert v.endswith("; between them 0.98x, near the ceiling: another process or swapping?")


def test_decode_stall_with_the_median_faster_than_predicted():
    turn = stalled(5.0, 2.0)
    v = estimate_verdict(rows(CPU_BIG, turn, decode=(100, turn.decode_tok_s)))
    assert "stalls took" in v and v.endswith(
        "; between them 2.00x, faster than predicted: the machine reads faster than the bandwidth figure the "
        "estimate uses")


def test_a_small_hiccup_is_not_a_stall():
    assert decode_stalls(stalled(17.0, 0.06)) is None  # 43 ms beyond the median pace: under 100 ms
    assert decode_stalls(stalled(17.0, 0.3, n=200)) is None  # 283 ms of a 3.7 s decode: under 20%
    assert decode_stalls(TurnFigures(decode_tokens=2, decode_s=0.5, decode_tok_s=2.0, itl_p50_ms=500.0)) is None
    assert decode_stalls(None) is None and decode_stalls(TurnFigures()) is None
    extra, gaps = decode_stalls(stalled(17.0, 1.3))
    assert gaps == 19 and extra == pytest.approx(1.3 - 0.017)


# ------------------------------------------------------------------ order
def test_the_biggest_gap_comes_first_either_way():
    # prefill 3x faster is a bigger gap than decode 2x slower
    v = estimate_verdict(rows(CPU_BIG, steady(50.0), prefill=(1000, 3000), decode=(100, 50)))
    assert v.startswith("prefill at 3.00x of the roofline, faster than predicted")
    assert v.endswith("; also decode at 0.50x of the ceiling")


def test_a_gap_within_25_percent_is_not_added():
    v = estimate_verdict(rows(CPU_BIG, steady(50.0), prefill=(1000, 900), decode=(100, 50)))
    assert v.startswith("decode at 0.50x") and "also" not in v


# ------------------------------------------------------------------ TTFT waterfall (F2)
def metrics(ttft, timeline, ubatches=(), prompt=100, prefill_tokens=100, reused=0):
    return SimpleNamespace(ttft_s=ttft, timeline=tuple(timeline), ubatches=tuple(ubatches), prompt_tokens=prompt,
                           prefill_tokens=prefill_tokens, reused_tokens=reused)


def test_ttft_verdict_no_first_token():
    assert ttft_verdict(metrics(None, [])) == "no first token was produced in this turn"
    assert ttft_verdict(metrics(0.5, [])) == "no first token was produced in this turn"


def test_ttft_verdict_cache_diverged():
    m = metrics(2.0, [("wait for engine", 0, 0.01), ("ubatch 1", 0.01, 1.9)], [(2950, 1.9)], prompt=3100,
                prefill_tokens=2950, reused=150)
    v = ttft_verdict(m, 12, ("You are a calm poet", "You are a loud pirate"))
    assert v.startswith("prompt of 3,100 tokens, 2,950 recomputed: the prompt differs from the cached one at token 12")
    assert "'You are a calm poet'" in v and v.endswith("an unchanged prefix is reused")


def test_ttft_verdict_compute_bound():
    m = metrics(6.6, [("wait for engine", 0, 0.1), ("ubatch 1", 0.1, 6.25)], [(2000, 6.25)], prompt=2000,
                prefill_tokens=2000)
    assert ttft_verdict(m) == "compute-bound: 6.25 s of 6.60 s is prefill of 2,000 tokens at 320 tok/s (0 reused from the cache)"


def test_ttft_verdict_names_other_processes_first_when_they_took_the_cpu():
    """A new user's F2 said "compute-bound … at 57 tok/s" on a turn where the Estimate
    verdict said other processes had taken 41% of the CPU."""
    m = metrics(6.6, [("wait for engine", 0, 0.1), ("ubatch 1", 0.1, 6.25)], [(2000, 6.25)], prompt=2000,
                prefill_tokens=2000)
    assert ttft_verdict(m, others_cpu=0.41) == (
        "other processes used 41% of the CPU during this turn; 6.25 s of 6.60 s is prefill of "
        "2,000 tokens at 320 tok/s (0 reused from the cache)")  # slowed by the others, not "compute-bound"
    assert ttft_verdict(m, others_cpu=0.1) == ttft_verdict(m)  # a little other work is not named


def test_ttft_verdict_queued():
    m = metrics(0.62, [("wait for engine", 0, 0.481), ("ubatch 1", 0.481, 0.04)], [(16, 0.04)])
    assert ttft_verdict(m) == "queued: 481 ms of 620 ms waiting for the engine (model load or a previous turn)"


def test_ttft_verdict_template():
    m = metrics(0.1, [("template", 0, 0.04), ("ubatch 1", 0.04, 0.02)], [(16, 0.02)])
    assert ttft_verdict(m) == "template rendering took 40 ms of 100 ms"


def test_ttft_verdict_largest_part():
    m = metrics(0.1, [("template", 0, 0.01), ("ubatch 1", 0.01, 0.02), ("first decode + sample", 0.03, 0.07)],
                [(16, 0.02)])
    assert ttft_verdict(m) == "first decode + sample is the largest part: 70 ms of 100 ms"


def test_threads_packed_onto_a_shared_core_are_named_with_the_thread_count_that_fits():
    """Measured here: SmolLM2 with -t 2 decoded 0.90 tok/s while one busy process (in
    another session) held one of the 2 cores, 45.6 with -t 1. The verdict names the
    threads and the -t that fits, not the model."""
    from dataclasses import replace

    busy = replace(CPU_TINY, others_cpu=0.5, threads=2, n_cores=2)
    r = rows(busy, turn=steady(0.9), ttft=(0.3, 2.2), prefill=(220.0, 30.5), decode=(150.0, 0.9))
    assert estimate_verdict(r) == (
        "other processes used 50% of the CPU during this turn; decode at 0.01x of the ceiling: llama.cpp's "
        "2 threads wait for each other after every op and other processes hold 1.0 of 2 cores, so threads "
        "share a core: try -t 1 (not measured: `kvtop tune` measures it)")
    # one thread, or threads that fit beside the others' work: no such advice
    for ctx in (replace(busy, threads=1), replace(busy, others_cpu=0.3, n_cores=8, threads=4)):
        assert "try -t" not in estimate_verdict(rows(ctx, turn=steady(0.9), decode=(150.0, 0.9)))
    # a decode merely slowed (not 10x under its ceiling) keeps the usual verdict
    assert "try -t" not in estimate_verdict(rows(busy, turn=steady(40.0), decode=(150.0, 40.0)))


def test_a_turn_kvtop_ran_on_the_free_cores_says_so_and_does_not_advise_t():
    """Without -t a busy turn runs on the cores others leave free: the verdict says on
    how many of kvtop's threads, then the usual reason, never "try -t"."""
    from dataclasses import replace

    fitted = replace(CPU_TINY, others_cpu=0.5, threads=1, engine_threads=2, n_cores=2)
    verdict = estimate_verdict(rows(fitted, turn=steady(30.0), ttft=(0.3, 0.9), prefill=(220.0, 60.0),
                                    decode=(150.0, 30.0)))
    assert verdict.startswith("other processes used 50% of the CPU during this turn, so it ran on 1 of "
                              "kvtop's 2 threads; "), verdict
    assert "try -t" not in verdict


def test_the_rows_carry_the_threads_the_turn_ran_on(smollm_shaped):
    from dataclasses import replace as dc_replace

    from helpers import FIXED_HW
    from scripted_engine import scripted_turn

    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.estimate_rows import estimate_rows
    from kvtop.runner.physics.kv_bytes import kv_layout
    from kvtop.runner.settings import Settings

    facts, s = load_facts(smollm_shaped), Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    lay = kv_layout(facts, 4096, "f16", "f16", False, 512)
    mt = scripted_turn(1, 1000.0, 600, 0, ["Hi"])[-1].metrics
    assert estimate_rows(facts, lay, FIXED_HW, s, turn=mt).context.engine_threads == 0  # not recorded: the engine's
    ctx = estimate_rows(facts, lay, FIXED_HW, s, turn=dc_replace(mt, n_threads=1, n_threads_batch=1)).context
    assert (ctx.threads, ctx.engine_threads) == (1, 2)


def test_the_waterfalls_verdict_names_threads_packed_onto_a_shared_core():
    """A trial's -t 2 turn beside a busy core: F2 said "compute-bound: 1.82 s of 1.84 s
    is prefill of 42 tokens at 23 tok/s" while the Estimate pane said the threads shared a
    core: try -t 1. The waterfall now says both, and only where the threads were packed."""
    def on(threads):
        m = metrics(1.84, [("ubatch 1", 0.0, 1.82), ("first decode + sample", 1.82, 0.02)], [(42, 1.82)],
                    prompt=42, prefill_tokens=42)
        m.n_threads = m.n_threads_batch = threads
        return m

    m = on(2)
    v = ttft_verdict(m, others_cpu=0.53, cpu=(2, 2, True))
    assert v.startswith("other processes used 53% of the CPU during this turn; ")
    assert v.endswith("; llama.cpp's 2 threads wait for each other after every op and other processes hold 1.1 of 2 "
                      "cores, so threads share a core: try -t 1 (not measured: `kvtop tune` measures it)"), v
    # on the free core (kvtop's own choice), on a GPU, or not known (a server): no such advice
    for kw in (dict(cpu=(2, 2, True), m=on(1)), dict(cpu=(2, 2, False)),
               dict(cpu=None)):
        assert "try -t" not in ttft_verdict(kw.pop("m", m), others_cpu=0.53, **kw)


def test_the_waterfall_says_a_busy_turn_ran_on_the_free_cores_as_the_estimate_pane_does():
    def on(threads):
        m = metrics(0.98, [("ubatch 1", 0.0, 0.943), ("first decode + sample", 0.943, 0.037)], [(40, 0.943)],
                    prompt=40, prefill_tokens=40)
        m.n_threads = m.n_threads_batch = threads
        return m

    assert ttft_verdict(on(1), others_cpu=0.64, cpu=(2, 2, True)) == (
        "other processes used 64% of the CPU during this turn, so it ran on 1 of kvtop's 2 threads; 943 ms of "
        "980 ms is prefill of 40 tokens at 42 tok/s (0 reused from the cache)")


def test_a_prompt_that_parted_from_the_cache_is_named_even_when_most_of_it_was_reused():
    """A trial's turn 3: 98 of 217 tokens recomputed because the prompt differed from the
    cache at token 119; the prefill pane said "cache diverged (F2: waterfall)" and F2 only
    said "compute-bound"."""
    m = metrics(1.58, [("ubatch 1", 0.0, 1.55), ("first decode + sample", 1.55, 0.03)], [(98, 1.55)], prompt=217,
                prefill_tokens=98, reused=119)
    v = ttft_verdict(m, 119, (" red?\nassistant\nSunsets are typically red due to the", "… red due to"))
    assert v.startswith("prompt of 217 tokens, 98 recomputed: the prompt differs from the cached one at token 119 ("), v
    assert v.endswith("; an unchanged prefix is reused (1.55 s of 1.58 s is that prefill, at 63 tok/s)"), v


def test_a_speculative_turn_faster_than_the_ceiling_names_speculation_not_the_caches():
    from dataclasses import replace

    turn = replace(steady(300.0), spec_tokens_per_pass=3.4)
    v = estimate_verdict(rows(turn=turn, decode=(100.0, 300.0)))
    assert "speculation made 3.4 tokens a pass of the weights" in v and "caches" not in v
