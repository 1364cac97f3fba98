"""The app's "find faster settings" as the engine runs it: the command and the two
events it answers with, plain frozen data (they cross the engine's pipe pickled).

``MeasureSettings`` asks the engine that holds the chat to time ``kvtop tune``'s
candidates against its own settings between turns, on the model it has loaded (a
context of their own each: the chat's context and KV cache are not touched), within
``budget_s``. ``TuneProgress`` says which A/B runs and when the run should end;
``TuneMeasured`` carries every arm's rates, whole, cut by a cancel or by the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.runner.policy.tuning import Base, Candidate

TOO_SMALL = "one A/B needs a budget of"  # then its seconds: the first skip's reason when none fits
Rates = tuple[tuple[str, tuple[float, ...]], ...]  # (metric, tok/s per repetition) pairs


@dataclass(frozen=True)
class MeasureSettings:
    turn_id: int  # cancelled as a turn is: ``Cancel(upto >= turn_id)``
    base: Base
    candidates: tuple[Candidate, ...]
    depth: int
    n_prompt: int
    n_gen: int
    reps: int
    budget_s: float


@dataclass(frozen=True)
class TuneProgress:
    turn_id: int
    index: int  # the A/B now running, from 1 (0: filling the base's depth)
    total: int
    flag: str
    elapsed_s: float
    eta_s: float | None  # seconds to the end, from the timings so far; None: not known yet


@dataclass(frozen=True)
class PairRates:
    candidate: Candidate
    base: Rates
    cand: Rates
    partial: bool  # cut before its rounds were done


@dataclass(frozen=True)
class TuneMeasured:
    turn_id: int
    pairs: tuple[PairRates, ...]
    skipped: tuple[tuple[Candidate, str], ...]  # not measured, and why
    cancelled: bool
    elapsed_s: float
    cpu_s: float  # the engine's own CPU seconds over the run (the busy rule's reading)
    probe_s: float = 0.0  # the first fill and warmup, which run whole (the plan's timings)
    longest_rep_s: float = 0.0  # the longest repetition: how far past the deadline one may end
