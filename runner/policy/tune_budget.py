"""How many repetitions of an A/B a budget holds, pure (issue 39: a small budget still
measures the most promising pair, or says before it starts that it cannot and what
budget would).

An A/B's cost, from what this run has measured so far: a load of the candidate's own
(when it needs one: the longest load so far), one warmup of each of its metrics, then
``reps`` rounds of one repetition per arm and metric. ``fit_reps`` is the most rounds
the time left holds (at most those asked); fewer than ``MIN_REPS`` measure no spread,
so such an A/B is not started. ``budget_for`` is the budget that would hold one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kvtop.runner.policy.tuning import MIN_REPS


def ab_cost(rep_s: Mapping[str, float], measures: Sequence[str], load_s: float, new_load: bool, reps: int) -> float:
    """Seconds an A/B of ``reps`` rounds should take (``rep_s``: one repetition of each metric)."""
    one = sum(rep_s[m] for m in measures)
    return (load_s if new_load else 0.0) + one + 2 * reps * one


def fit_reps(rep_s: Mapping[str, float], measures: Sequence[str], load_s: float, new_load: bool, left: float,
             want: int) -> int | None:
    """The rounds (at most ``want``) that ``left`` seconds hold; None when the timings
    are not known yet (nothing of that metric has run)."""
    if any(m not in rep_s for m in measures):
        return None
    one = sum(rep_s[m] for m in measures)
    fixed = ab_cost(rep_s, measures, load_s, new_load, 0)
    if one <= 0:
        return want
    return max(0, min(want, math.floor((left - fixed) / (2 * one))))


def budget_for(spent_s: float, rep_s: Mapping[str, float], measures: Sequence[str], load_s: float,
               new_load: bool) -> int:
    """A ``--budget`` that holds what was spent so far and one A/B of ``MIN_REPS`` rounds,
    with a quarter more for the machine's swings, rounded up to 5 s."""
    need = (spent_s + ab_cost(rep_s, measures, load_s, new_load, MIN_REPS)) * 1.25
    return int(5 * math.ceil(need / 5))
