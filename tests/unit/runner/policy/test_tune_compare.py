"""bench/tune_vs_llama_bench.py's arithmetic (runner.policy.tune_compare): each tool's
ratio is llama-bench's avg_ts rule over the repetitions of every round pooled, and the
issue's two goals, on the ratios of docs/tune.md's quiet runs 4 and 5."""

import pytest

from kvtop.runner.policy.tune_compare import (
    KvtopRun,
    Row,
    ToolRound,
    agrees,
    expected,
    goals,
    pair_expected,
    ratio,
    span,
)


def test_a_ratio_is_the_mean_of_the_rates_as_llama_bench_averages_them():
    # llama-bench's avg_ts is the mean of each sample's t/s, not the t/s of the mean time
    base, cand = (100.0, 50.0), (90.0, 90.0)
    assert ratio(base, cand) == pytest.approx(90 / 75)
    time_of_mean = 2 / (1 / 100 + 1 / 50)  # 66.7 t/s: what a mean of the times would give
    assert ratio(base, cand) != pytest.approx(90 / time_of_mean)
    assert ratio((), cand) is None and ratio((0.0,), cand) is None


def row(lb_rounds, kv_rounds, flag="-t 1"):
    r = Row("-t 1 / -t 2", "tg", flag)
    r.lb = [ToolRound(b, c) for b, c in lb_rounds]
    r.kv = [KvtopRun(b, c, v, w) for b, c, v, w in kv_rounds]
    return r


def test_rounds_are_pooled_and_each_rounds_ratio_is_kept():
    # run 4's and run 5's llama-bench -t ratios (0.61, 0.71) as two rounds of one run
    r = row([((100.0, 100.0), (61.0, 61.0)), ((100.0, 100.0), (71.0, 71.0))],
            [((100.0, 100.0), (69.0, 69.0), "slower", False), ((100.0, 100.0), (62.0, 62.0), "slower", False)])
    assert r.lb_rounds == pytest.approx([0.61, 0.71]) and r.kv_rounds == pytest.approx([0.69, 0.62])
    assert r.lb_ratio == pytest.approx(0.66) and r.kv_ratio == pytest.approx(0.655)
    # each run alone missed the 10% goal (1.12 and 0.87 in docs/tune.md); pooled, both tools agree to 1%
    assert r.agreement == pytest.approx(0.655 / 0.66) and r.within
    assert r.reps == (4, 4)
    assert span(r.lb_rounds) == "0.61-0.71" and span([1.0]) == "1.00" and span([]) == "-"


@pytest.mark.parametrize(("kv", "lb", "within"), [(0.97, 1.0, True), (1.10, 1.0, True), (0.90, 1.0, True),
                                                  (1.14, 1.0, False), (0.87, 1.0, False), (0.94, 0.83, False)])
def test_within_ten_percent(kv, lb, within):
    r = row([((1.0,), (lb,))], [((1.0,), (kv,), "same", False)])
    assert r.within is within


def test_which_side_llama_bench_calls_faster():
    assert expected(1.16) == "candidate" and expected(0.86) == "base"
    assert expected(1.15) is None and expected(0.87) is None and expected(1.0) is None and expected(None) is None


def test_the_recommendation_must_agree_beyond_the_band():
    slower = KvtopRun((100.0, 101.0), (62.0, 61.0), "slower", wins=False)
    assert agrees("base", slower) is True  # -t 1 at 0.62x: kvtop keeps -t 2, as llama-bench's 0.71 says
    assert agrees("base", KvtopRun((1.0,), (1.0,), "faster", wins=True)) is False
    assert agrees("candidate", KvtopRun((1.0,), (1.2,), "same", wins=False)) is False
    assert agrees(None, slower) is None  # llama-bench within the band: nothing to agree with
    assert agrees("base", KvtopRun((1.0,), (0.6,), "slower", wins=False, busy=True)) is None  # judged nothing


def test_a_candidate_whose_tests_disagree_has_no_faster_side():
    pp = row([((100.0,), (80.0,))], [], flag="-fa off")
    tg = row([((100.0,), (120.0,))], [], flag="-fa off")
    assert pair_expected([pp, tg]) is None
    assert pair_expected([row([((100.0,), (100.0,))], [], "-fa off"), tg]) == "candidate"


def test_goals_over_the_rows_and_unequal_repetitions():
    fa_pp = row([((100.0, 100.0), (96.0, 96.0))], [((100.0, 100.0), (93.0, 93.0), "slower", False)], "-fa off")
    fa_tg = row([((100.0, 100.0), (83.0, 83.0))], [((100.0, 100.0), (94.0, 94.0), "slower", False)], "-fa off")
    t_tg = row([((100.0, 100.0), (61.0, 61.0))], [((100.0,), (69.0,), "unknown", False)], "-t 1")
    g = goals([fa_pp, fa_tg, t_tg])
    assert (g.within, g.rows) == (1, 3)  # 0.97 within; 1.13 and 1.13 not
    assert (g.agree, g.checked) == (2, 2)  # -fa off (tg 0.83: base faster) not recommended; -t 1 not either
    assert g.unequal_reps == ["-t 1 / -t 2 tg"]  # kvtop measured one repetition where llama-bench had two


def test_each_arms_mean_rate_for_both_tools():
    r = row([((100.0, 110.0), (60.0, 62.0))], [((104.0, 106.0), (64.0, 66.0), "slower", False)])
    assert r.means("base") == pytest.approx((105.0, 105.0)) and r.means("cand") == pytest.approx((61.0, 65.0))


def test_busy_runs_are_counted_apart_from_the_checked_ones():
    # a run on a crowded machine judges nothing: neither an agreement nor a miss (the bench says how many)
    r = row([((100.0, 100.0), (60.0, 60.0))], [((100.0, 100.0), (280.0, 280.0), "faster", False)])
    r.kv = [KvtopRun(k.base, k.cand, k.verdict, k.wins, busy=True) for k in r.kv]
    g = goals([r])
    assert (g.agree, g.checked, g.busy) == (0, 0, 1)
