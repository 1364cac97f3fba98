"""How many rounds of an A/B a budget holds (runner.policy.tune_budget), from recorded
timings: a small budget plans fewer rounds, one too small for two rounds plans none
(and says what budget would), and unknown timings plan nothing yet."""

from kvtop.runner.policy.tune_budget import ab_cost, budget_for, fit_reps

REP = {"decode": 1.0, "prefill": 0.5}
BOTH = ("decode", "prefill")


def test_an_ab_costs_its_load_its_warmup_and_two_arms_per_round():
    assert ab_cost(REP, BOTH, 4.0, True, 3) == 4.0 + 1.5 + 2 * 3 * 1.5
    assert ab_cost(REP, ("decode",), 4.0, False, 2) == 1.0 + 4 * 1.0  # threads: the same load


def test_the_rounds_fit_the_time_left():
    assert fit_reps(REP, BOTH, 4.0, True, 60.0, 3) == 3  # at most those asked
    assert fit_reps(REP, BOTH, 4.0, True, 4.0 + 1.5 + 2 * 2 * 1.5 + 0.1, 3) == 2  # a small budget: fewer
    assert fit_reps(REP, BOTH, 4.0, True, 8.0, 3) == 0  # not two rounds: none (the caller says so)
    assert fit_reps({"decode": 1.0}, BOTH, 4.0, True, 60.0, 3) is None  # prefill not timed yet


def test_the_budget_that_would_hold_one_ab():
    need = budget_for(10.0, REP, BOTH, 4.0, True)
    assert need % 5 == 0 and need >= (10.0 + ab_cost(REP, BOTH, 4.0, True, 2)) * 1.25
    assert fit_reps(REP, BOTH, 4.0, True, need - 10.0, 3) >= 2  # that budget, less what was spent, holds two rounds
