"""``kvtop tune``'s pure decisions (runner.policy.tuning): the candidate list from the
user's settings, and the rule that a candidate wins only beyond the run-to-run spread
it measured, on recorded timings (issue 39's: the demo model at depth 512 on a 2-core
Xeon decoded 32.5 tok/s with -fa auto and 55.3 with -fa off)."""

import pytest

from kvtop.runner.policy.tuning import Base, Judgement, Metric, candidate_list, recommend, spread, thread_values

BASE = Base(n_threads=2, n_threads_batch=2, n_ubatch=512, n_batch=512, flash_attn="auto")


def flags(cands):
    return [c.flag for c in cands]


def test_the_candidates_on_two_cores_without_a_gpu():
    cands = candidate_list(BASE, n_cores=2, gpu=False, n_prompt=256)
    assert flags(cands) == ["-fa off", "-t 1", "-tb 1", "-ub 128", "-ctk q8_0 -ctv q8_0"]
    by = {c.flag: c for c in cands}
    assert by["-fa off"].measures == ("decode", "prefill")
    assert by["-t 1"].measures == ("decode",) and by["-tb 1"].measures == ("prefill",)  # -t keeps -tb, and back
    assert by["-t 1"].applied(BASE) == Base(1, 2, 512, 512, "auto")
    assert by["-ctk q8_0 -ctv q8_0"].precision and not any(c.precision for c in cands[:-1])


def test_the_candidates_follow_the_users_settings():
    mine = Base(n_threads=1, n_threads_batch=1, n_ubatch=128, n_batch=512, flash_attn="off",
                cache_type_k="q8_0", cache_type_v="q8_0")
    got = flags(candidate_list(mine, n_cores=2, gpu=True, n_prompt=512))
    # the other flash attention, the other thread counts, a micro-batch either way, -ngl with a GPU,
    # and no KV candidate for a cache already quantised
    assert got == ["-fa on", "-t 2", "-tb 2", "-ub 64", "-ub 256", "-ngl 99"]
    # a quantised V cache needs flash attention: not a candidate beside -fa off
    assert flags(candidate_list(Base(2, 2, 512, 512, "off"), 2, False, 256)) == ["-fa on", "-t 1", "-tb 1", "-ub 128"]
    offloaded = flags(candidate_list(Base(2, 2, 512, 512, "on", n_gpu_layers=99), 2, True, 256))
    assert "-fa off" in offloaded and "-ngl 0" in offloaded


def test_thread_counts_up_to_the_cores():
    assert thread_values(1) == [1] and thread_values(2) == [1, 2] and thread_values(16) == [1, 4, 8, 16]
    assert "-t" not in " ".join(flags(candidate_list(Base(1, 1, 512, 512, "auto"), 1, False, 256)))
    big = flags(candidate_list(Base(16, 16, 512, 512, "auto"), 16, False, 256))
    assert [f for f in big if f.startswith("-t ")] == ["-t 1", "-t 4", "-t 8"]


def test_a_micro_batch_is_tried_only_below_the_prompt():
    assert not [f for f in flags(candidate_list(BASE, 2, False, n_prompt=32)) if f.startswith("-ub")]


FA = candidate_list(BASE, 2, False, 256)[0]
T1 = candidate_list(BASE, 2, False, 256)[1]


def test_the_issues_flash_attention_measurement_wins():
    j = Judgement(FA, {"decode": Metric((32.1, 32.9, 32.5), (55.0, 55.6, 55.3)),
                       "prefill": Metric((410.0, 402.0, 405.0), (394.0, 392.0, 390.0))})
    assert j.metrics["decode"].gain == pytest.approx(1.70, abs=0.01) and j.metrics["decode"].verdict == "faster"
    assert j.metrics["prefill"].verdict == "slower"  # 0.97x: beyond its 3% floor
    assert j.wins and not j.loses  # decode 1.70x outweighs it
    assert j.gains_text(512) == "decode 1.70x, prefill 0.97x at depth 512"
    assert recommend([j]) == [j]


def test_a_gain_inside_the_spread_it_measured_does_not_win():
    """15% faster by the means, but the arms themselves varied by 40%: not a result."""
    m = Metric((50.0, 60.0, 40.0), (58.0, 52.0, 62.0))
    assert m.gain == pytest.approx(1.147, abs=0.001) and m.noise == pytest.approx(0.4)
    assert m.verdict == "same" and not Judgement(FA, {"decode": m}).wins
    # the same gain on steady arms wins
    assert Judgement(FA, {"decode": Metric((50.0, 50.5, 49.5), (57.0, 57.5, 57.6))}).wins


def test_slower_anywhere_loses_and_one_repetition_cannot_win():
    mixed = Judgement(FA, {"decode": Metric((30.0, 30.2), (32.0, 32.1)), "prefill": Metric((400.0, 401.0),
                                                                                           (300.0, 301.0))})
    assert mixed.loses and not mixed.wins and recommend([mixed]) == []
    once = Judgement(T1, {"decode": Metric((30.0,), (45.0,))})
    assert once.metrics["decode"].noise is None and once.metrics["decode"].verdict == "unknown" and not once.wins
    assert spread([1.0]) is None and spread([90.0, 110.0]) == pytest.approx(0.2)


def test_a_busy_machine_judges_nothing():
    j = Judgement(FA, {"decode": Metric((30.0, 30.2), (45.0, 45.1))}, busy=0.91)
    assert not j.wins and not j.loses and recommend([j]) == []


def test_one_winner_per_group_and_never_a_cache_type():
    cands = {c.flag: c for c in candidate_list(Base(4, 4, 512, 512, "auto"), 4, False, 256)}
    fast = Metric((10.0, 10.1), (20.0, 20.1))
    faster = Metric((10.0, 10.1), (30.0, 30.1))
    t1, t2 = Judgement(cands["-t 1"], {"decode": fast}), Judgement(cands["-t 2"], {"decode": faster})
    kv = Judgement(cands["-ctk q8_0 -ctv q8_0"], {"decode": faster, "prefill": faster})
    fa = Judgement(cands["-fa off"], {"decode": fast, "prefill": Metric((5.0, 5.0), (5.0, 5.05))})
    assert [j.candidate.flag for j in recommend([t1, t2, kv, fa])] == ["-t 2", "-fa off"]
