"""Forecasts at today's load (issue 23): the CPU share other processes take now slows
the CPU's work, and only that. The forecast before Enter was 5-27x short on a machine
at 63-79% load although kvtop measured the load; these check the pricing's direction
and structure (which way, which phase, what is left alone), not a timing."""

import argparse
import json

import pytest

from kvtop.runner.calibration.forecast import Basis, Forecaster
from kvtop.runner.calibration.load import CPULoad, LoadedEngine, at_load, load_note, mixed, slowdown, slowed, ttft_texts
from kvtop.runner.calibration.store import Samples

ROOF = Basis(lambda n, d: n * 1e-3, lambda d: 5e-3, 512)


def quiet(prompt=800, reply=64):
    return Forecaster(ROOF, Samples()).forecast(prompt, 0, reply)


def test_threads_that_fit_beside_the_others_are_not_slowed():
    assert slowdown(0.0, 8, 8) == 1.0
    assert slowdown(4.0, 8, 4) == 1.0  # 4 + 4 threads on 8 cores: each holds a core
    assert slowdown(0.5, 2, 1) == 1.0


def test_one_thread_gets_its_fair_share_of_a_core():
    # others keep 1.5 of 2 cores busy: 2.5 runnable threads share 2 cores, 0.8 each
    assert slowdown(1.5, 2, 1) == pytest.approx(2.5 / 2)


@pytest.mark.parametrize("n_cores,threads", [(2, 2), (4, 4), (16, 8)])
def test_more_load_slows_more_and_threads_that_wait_for_each_other_suffer_most(n_cores, threads):
    loads = [0.25 * n_cores * k for k in range(5)]
    factors = [slowdown(o, n_cores, threads) for o in loads]
    assert factors == sorted(factors) and factors[-1] > factors[0]
    # at the same load, t threads that meet at a barrier lose more than one thread does
    busy = 0.75 * n_cores
    assert slowdown(busy, n_cores, threads) > slowdown(busy, n_cores, 1) >= 1.0


# measured here: 2 cores, ``yes`` processes as the others (runner/system/cpu_pace.py's table)
MEASURED = {  # (threads, others): (decode slowdowns, prefill slowdowns) for SmolLM2 and Gemma-3
    (2, 1): ((3.02, 3.33), (1.92, 2.01)),
    (2, 2): ((4.05, 3.91), (3.00, 2.31)),
    (1, 2): ((1.34, 1.58), (1.42, 1.41)),
}


@pytest.mark.parametrize("threads,others", sorted(MEASURED))
def test_the_price_is_within_the_benchmarks_goal_of_what_was_measured(threads, others):
    """bench/forecast_accuracy.py --hog's goal is forecast/measured 0.8-1.25: the price
    alone must land there for every slowdown measured on this machine. The old rule
    (``pace ** t`` for both phases) priced decode with one core held at 2.25 (0.75 of
    3.02) and prefill with both cores held at 4.0 (1.73 of 2.31)."""
    decode, prefill = MEASURED[(threads, others)]
    for m in decode:
        assert 0.8 <= slowdown(others, 2, threads) / m <= 1.25
    for m in prefill:
        assert 0.8 <= slowdown(others, 2, threads, long_ops=True) / m <= 1.25


def test_long_ops_lose_less_than_short_ones_and_one_thread_has_no_barrier():
    assert slowdown(1, 2, 2, long_ops=True) < slowdown(1, 2, 2)
    assert slowdown(2, 2, 1, long_ops=True) == slowdown(2, 2, 1) == pytest.approx(1.5)
    assert slowdown(0.0, 2, 2, long_ops=True) == 1.0


def test_the_issue_machine_is_priced_several_times_slower():
    """2 cores, -t 2, others at 63-79%: measured 5-27x the quiet forecast. The price
    must be well above 1 (it was 1: nothing priced), not exact."""
    for share in (0.63, 0.79):
        assert slowdown(share * 2, 2, 2) > 2.5


def test_only_the_cpus_share_of_the_work_is_slowed():
    assert mixed(4.0, 1.0) == 4.0
    assert mixed(4.0, 0.0) == 1.0  # every layer on a GPU: the GPU's pace whatever the CPU does
    assert mixed(4.0, 0.25) == pytest.approx(1.75)


def test_a_forecast_at_load_keeps_the_quiet_one_and_says_the_share():
    fc = quiet()
    load = CPULoad.of_share(0.75, 2)
    busy = at_load(fc, load, LoadedEngine(2, 2, 1.0))
    assert busy.quiet_ttft_s == fc.ttft_s and busy.quiet_reply_s == fc.reply_s
    assert busy.ttft_s > fc.ttft_s and busy.reply_s > fc.reply_s and busy.decode_tok_s < fc.decode_tok_s
    assert busy.others_cpu == pytest.approx(0.75) and slowed(busy)
    assert busy.prompt_tokens == fc.prompt_tokens and busy.reply_tokens == fc.reply_tokens
    on_gpu = at_load(fc, load, LoadedEngine(2, 2, 0.0))
    assert on_gpu.ttft_s == pytest.approx(fc.ttft_s) and not slowed(on_gpu)  # nothing on the CPU to slow
    assert at_load(fc, None, LoadedEngine(2, 2, 1.0)) is fc  # not measured: the quiet forecast as it was
    for share in (0.0, 0.2):  # under the busy test: the calibration's own turns ran at such loads
        calm = at_load(fc, CPULoad.of_share(share, 2), LoadedEngine(2, 2, 1.0))
        assert calm is fc and not slowed(calm) and load_note(calm) == ""


def test_the_json_and_the_words():
    fc = at_load(quiet(), CPULoad.of_share(0.75, 2), LoadedEngine(2, 2, 1.0))
    d = fc.to_dict()
    assert d["ttft_s"] == fc.ttft_s and d["quiet_ttft_s"] == fc.quiet_ttft_s and d["others_cpu"] == 0.75
    q = quiet().to_dict()
    assert q["quiet_ttft_s"] == q["ttft_s"] and q["others_cpu"] is None
    long, short, plain = ttft_texts(fc)
    assert long.endswith("on a quiet machine)") and "at today's load" in long and "at today's load" in short
    assert "75%" in load_note(fc) and "quiet machine" in load_note(fc)


def test_the_border_says_the_load_before_the_token_counts():
    from kvtop.tui.turn.forecasting import forecast_basis_line, forecast_line

    fc = at_load(quiet(), CPULoad.of_share(0.75, 2), LoadedEngine(2, 2, 1.0))
    wide = forecast_line(fc, 4096, 200)
    assert "at today's load (" in wide and "on a quiet machine)" in wide and wide.endswith("; fits")
    narrow = forecast_line(fc, 4096, 60)
    assert "at today's load" in narrow and narrow.endswith("; fits"), narrow
    for width in (46, 57):  # the input at 160 columns: the draft's tokens are said too (new-user trial)
        line = forecast_line(fc, 4096, width)
        assert line.startswith(f"{fc.prompt_tokens:,} tok") and "→ TTFT" in line and "at today's load" in line, \
            (width, line)
    # 1.5 of 2 cores held and 2 threads: packed onto a shared core, so the border says what to do before Enter
    assert forecast_basis_line(fc, 120) == ("others use 75% of the CPU; more threads than free cores: try -t 1 (not measured: kvtop tune)")
    assert forecast_basis_line(fc, 56) == "others use 75% of the CPU; try -t 1"  # 160 columns
    one = at_load(quiet(), CPULoad.of_share(0.75, 2), LoadedEngine(1, 1, 1.0))  # one thread: nothing to advise
    assert forecast_basis_line(one, 120).endswith("; others use 75% of the CPU")
    assert forecast_basis_line(one, 56) == "forecast: roofline; others use 75% of the CPU"


def test_kvtop_estimate_json_prices_the_load(smollm_shaped, tmp_path, monkeypatch):
    from helpers import FIXED_HW

    from kvtop.runner.commands.estimate_forecast import estimate_settings, forecast_block, forecast_line
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here
    from kvtop.runner.physics.kv_bytes import kv_layout

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path))
    facts = load_facts(smollm_shaped)
    a = argparse.Namespace(model=smollm_shaped, ctx=4096, threads=2, batch_size=512, ubatch_size=512,
                           n_gpu_layers=0, flash_attn="auto", cache_type_k="f16", cache_type_v="f16",
                           swa_full=False, prompt_tokens=512, output_tokens=64)
    here = Here(facts, kv_layout(facts, 4096, "f16", "f16", False, 512), FIXED_HW, estimate_settings(a))
    quiet_block = forecast_block(here, a, None, None)
    busy_block = json.loads(json.dumps(forecast_block(here, a, None, CPULoad.of_share(0.7, 2))))
    assert busy_block["others_cpu"] == pytest.approx(0.7)
    assert busy_block["quiet_ttft_s"] == pytest.approx(quiet_block["ttft_s"])
    assert busy_block["ttft_s"] > busy_block["quiet_ttft_s"]
    assert "at today's load" in forecast_line({"forecast": busy_block})[1]
    assert "today's load" not in forecast_line({"forecast": quiet_block})[1]


def test_threads_that_outnumber_the_free_cores_are_said_not_priced():
    """Beside another session's busy process, -t 2 on 2 cores decoded 0.90 tok/s against
    -t 1's 45.6: no price reaches that, so the note says it and names the -t that fits."""
    fc = at_load(quiet(), CPULoad.of_share(0.5, 2), LoadedEngine(2, 2, 1.0))
    assert fc.free_cores == 1 and fc.to_dict()["free_cores"] == 1
    assert load_note(fc).endswith("more threads than the 1 free core: expect far slower still; "
                                  "try -t 1 (not measured: `kvtop tune` measures it)")
    one = at_load(quiet(), CPULoad.of_share(0.5, 2), LoadedEngine(1, 1, 1.0))
    assert one.free_cores is None and "try -t" not in load_note(one)
    roomy = at_load(quiet(), CPULoad.of_share(0.3, 8), LoadedEngine(4, 4, 1.0))  # 2.4 of 8 cores held
    assert roomy.free_cores is None
    assert at_load(quiet(), CPULoad.of_share(0.5, 2), LoadedEngine(2, 2, 0.0)).free_cores is None  # all on a GPU


def test_kvtop_runs_a_turn_on_the_free_cores_and_prices_those_threads():
    """Without -t, a turn on a busy machine runs on the cores others leave free (packed
    threads decoded 0.90 tok/s beside one busy process; one thread 45.6): the forecast is
    on those threads, and says so instead of advising -t."""
    from kvtop.runner.calibration.load import thread_scaling

    engine = LoadedEngine(2, 2, 1.0, fits=True)
    fc = at_load(quiet(), CPULoad.of_share(0.5, 2), engine)  # one of 2 cores held
    assert fc.threads == (1, 1) and fc.free_cores is None
    assert fc.to_dict()["turn_threads"] == 1 and fc.to_dict()["turn_threads_batch"] == 1
    q = quiet()
    # one thread beside one held core holds a core: only one thread's quiet cost
    assert fc.decode_tok_s == pytest.approx(q.decode_tok_s / thread_scaling(2, 1))
    assert fc.prefill_s == pytest.approx(q.prefill_s * thread_scaling(2, 1, long_ops=True))
    note = load_note(fc)
    assert "runs on 1 thread, the free cores (-t N keeps N)" in note and "try -t" not in note
    # with -t 2 the user's threads stay: the price is on 2 threads and the advice is said
    pinned = at_load(quiet(), CPULoad.of_share(0.5, 2), LoadedEngine(2, 2, 1.0))
    assert pinned.threads is None and pinned.free_cores == 1 and "try -t 1" in load_note(pinned)
    # below the busy test nothing changes: the calibration's own turns ran at such loads
    assert at_load(quiet(), CPULoad.of_share(0.1, 2), engine).threads is None


def test_turn_threads_follow_the_free_cores_only_when_kvtop_chose_them():
    from kvtop.runner.calibration.load import turn_threads

    assert turn_threads(2, 2, CPULoad(1.5, 2)) == (1, 1)
    assert turn_threads(2, 2, CPULoad(2.0, 2)) == (1, 1)  # never fewer than one
    assert turn_threads(2, 2, CPULoad(1.5, 2), fits=False) == (2, 2)  # -t 2
    assert turn_threads(2, 2, CPULoad(0.2, 2)) == (2, 2)  # under the busy test
    assert turn_threads(2, 2, None) == (2, 2)  # not measured yet
    assert turn_threads(8, 8, CPULoad(2.4, 8)) == (5, 5)  # 30% of 8 cores: 2.4 held, 5 free
    assert turn_threads(4, 8, CPULoad(3.0, 8)) == (4, 5)  # at most the engine's own


# 2 → 1 thread, quiet, kvtop bench -p 512 -n 64 (runner/system/cpu_pace.py's table)
FEWER_THREADS = {"prefill": (1.89, 1.67, 1.88), "decode": (1.83, 1.46, 1.43, 1.69, 1.67, 1.72)}


def test_fewer_threads_cost_what_was_measured_within_the_benchmarks_goal():
    from kvtop.runner.calibration.load import thread_scaling

    for m in FEWER_THREADS["prefill"]:
        assert 0.8 <= thread_scaling(2, 1, long_ops=True) / m <= 1.25
    for m in FEWER_THREADS["decode"]:
        assert 0.8 <= thread_scaling(2, 1) / m <= 1.25
    assert thread_scaling(2, 2) == 1.0 and thread_scaling(1, 2) < 1.0 < thread_scaling(8, 4)


def test_the_border_at_160_columns_on_a_busy_machine_keeps_the_new_tokens():
    """A trial at 160 columns, others at 91-99%: "1,007 tok → TTFT ≈ 8.76 s at today's load;
    fits", without the count the cache leaves to compute that the README promises."""
    import dataclasses

    from kvtop.tui.turn.forecasting import forecast_line

    fc = dataclasses.replace(at_load(quiet(), CPULoad.of_share(0.75, 2), LoadedEngine(2, 2, 1.0)),
                             cached_tokens=366)
    line = forecast_line(fc, 4096, 57)
    assert f", {fc.prompt_tokens - 366:,} new → TTFT" in line and "at today's load" in line, line
    assert line.endswith("; fits"), line
