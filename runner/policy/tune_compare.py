"""bench/tune_vs_llama_bench.py's arithmetic, pure: ``kvtop tune``'s ratio for a pair of
settings against llama-bench's for the same pair, and the issue's goals (issue 39).

Both tools are given the same work: the same tests (depth, pp, tg), the same number of
repetitions per arm, measured in the same rounds and in the same order (A B, then B A),
so neither tool's ratio carries a drift of the machine that the other's does not.
A tool's ratio for a test is its candidate arm's mean rate over its base arm's, every
repetition of every round pooled: llama-bench's ``avg_ts`` (the mean of its samples'
t/s) taken over the pooled samples, which is also ``kvtop tune``'s gain.

The goals: kvtop's ratio within ``WITHIN`` (10%) of llama-bench's, and, whenever
llama-bench's ratio is beyond ``FASTER`` (1.15) or below ``SLOWER`` (0.87), kvtop's
recommendation agrees with llama-bench's faster setting (a faster candidate is
recommended, a slower one is not) in each of kvtop's runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

WITHIN = 0.10
FASTER = 1.15
SLOWER = 0.87


def mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def ratio(base: Sequence[float], cand: Sequence[float]) -> float | None:
    """The candidate's mean rate over the base's (llama-bench's avg_ts, kvtop's gain)."""
    b, c = mean(base), mean(cand)
    if b is None or c is None or b <= 0:
        return None
    return c / b


def expected(lb_ratio: float | None) -> str | None:
    """Which side llama-bench says is faster: "candidate", "base", or None (within the goal's band)."""
    if lb_ratio is None:
        return None
    if lb_ratio > FASTER:
        return "candidate"
    if lb_ratio < SLOWER:
        return "base"
    return None


@dataclass(frozen=True)
class KvtopRun:
    """One ``kvtop tune`` run's result for one candidate's metric: its rates per arm,
    the metric's verdict, whether the candidate won (it is in the recommended line),
    and whether the machine was too busy for it to judge."""

    base: tuple[float, ...]
    cand: tuple[float, ...]
    verdict: str  # faster, slower, same, unknown
    wins: bool
    busy: bool = False


@dataclass(frozen=True)
class ToolRound:
    """One round of llama-bench: its samples (t/s) per arm."""

    base: tuple[float, ...]
    cand: tuple[float, ...]


@dataclass
class Row:
    """One pair and test (pp or tg), every round of both tools."""

    pair: str
    test: str
    flag: str  # kvtop's candidate for this row ("-fa off", "-t 1", "-tb 1")
    lb: list[ToolRound] = field(default_factory=list)
    kv: list[KvtopRun] = field(default_factory=list)

    def _pooled(self, runs: Sequence[ToolRound | KvtopRun]) -> float | None:
        return ratio([x for r in runs for x in r.base], [x for r in runs for x in r.cand])

    @property
    def lb_ratio(self) -> float | None:
        return self._pooled(self.lb)

    @property
    def kv_ratio(self) -> float | None:
        return self._pooled(self.kv)

    @property
    def lb_rounds(self) -> list[float]:
        return [x for r in self.lb if (x := ratio(r.base, r.cand)) is not None]

    @property
    def kv_rounds(self) -> list[float]:
        return [x for r in self.kv if (x := ratio(r.base, r.cand)) is not None]

    def means(self, arm: str) -> tuple[float | None, float | None]:
        """One arm's ("base" or "cand") mean t/s over every round: llama-bench's, kvtop's."""
        def m(runs: Sequence[ToolRound | KvtopRun]) -> float | None:
            return mean([x for r in runs for x in (r.base if arm == "base" else r.cand)])
        return m(self.lb), m(self.kv)

    @property
    def agreement(self) -> float | None:
        """kvtop's ratio over llama-bench's."""
        lb, kv = self.lb_ratio, self.kv_ratio
        return kv / lb if lb and kv is not None else None

    @property
    def within(self) -> bool | None:
        a = self.agreement
        return None if a is None else abs(a - 1) <= WITHIN + 1e-9

    @property
    def reps(self) -> tuple[int, int]:
        """The repetitions per arm each tool measured (llama-bench's, kvtop's): fewest of the two arms."""
        def n(runs: Sequence[ToolRound | KvtopRun]) -> int:
            return min(sum(len(r.base) for r in runs), sum(len(r.cand) for r in runs)) if runs else 0
        return n(self.lb), n(self.kv)


def pair_expected(rows: Sequence[Row]) -> str | None:
    """llama-bench's faster setting for one kvtop candidate over its rows: the side every
    row beyond the band names (None when none is beyond it, or they disagree)."""
    sides = {e for r in rows if (e := expected(r.lb_ratio)) is not None}
    return sides.pop() if len(sides) == 1 else None


def agrees(side: str | None, run: KvtopRun) -> bool | None:
    """Whether one kvtop run's recommendation agrees with llama-bench's faster ``side``;
    None when there is nothing to agree with (no side, or the run judged nothing: busy)."""
    if side is None or run.busy:
        return None
    return run.wins if side == "candidate" else not run.wins


@dataclass(frozen=True)
class Goals:
    within: int
    rows: int
    agree: int
    checked: int  # kvtop runs whose recommendation was checked (llama-bench beyond the band, not busy)
    busy: int  # kvtop runs beyond the band left unchecked: the machine was too busy for them to judge
    unequal_reps: list[str]


def goals(rows: Sequence[Row]) -> Goals:
    """Both goals over all rows: rows within 10%, and runs whose recommendation agrees."""
    within = sum(1 for r in rows if r.within)
    agree = checked = busy = 0
    by_flag: dict[str, list[Row]] = {}
    for r in rows:
        by_flag.setdefault(r.flag, []).append(r)
    for flag_rows in by_flag.values():
        side = pair_expected(flag_rows)
        for run in flag_rows[0].kv:
            busy += int(side is not None and run.busy)
            a = agrees(side, run)
            if a is not None:
                checked += 1
                agree += int(a)
    unequal = [f"{r.pair} {r.test}" for r in rows if r.reps[0] != r.reps[1]]
    return Goals(within, len(rows), agree, checked, busy, unequal)


def span(xs: Sequence[float]) -> str:
    """Per-round ratios as "min-max" (one: itself; none: "-")."""
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f}" if len(xs) == 1 or f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"
