"""``kvtop tune``'s measured A/Bs as its output and its judgements read them: the sizes
of each test, each arm's rates per metric and the others' CPU share, and the rule's
judgement (runner.policy.tuning). The A/Bs themselves run in the engine
(runner.engine.tune_in_engine, through runner.commands.tune_engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtop.runner.policy.tuning import Base, Candidate, Judgement, Metric

if TYPE_CHECKING:
    from kvtop.runner.events import Loaded


@dataclass(frozen=True)
class Sizes:
    depth: int
    n_prompt: int
    n_gen: int
    reps: int

    @property
    def n_ctx(self) -> int:
        return self.depth + self.n_prompt + self.n_gen + 8


@dataclass
class ArmRun:
    """One arm's repetitions of one A/B: rates (tok/s) per metric, and the others' CPU share."""

    base: Base
    rates: dict[str, list[float]] = field(default_factory=dict)
    others: list[float] = field(default_factory=list)
    loaded: Loaded | None = None


@dataclass
class ABRun:
    candidate: Candidate
    a: ArmRun
    b: ArmRun
    partial: bool = False
    note: str = ""


def judgement(ab: ABRun) -> Judgement:
    from kvtop.runner.calibration.busy import too_busy

    metrics = {k: Metric(tuple(ab.a.rates.get(k, [])), tuple(ab.b.rates.get(k, [])))
               for k in ab.candidate.measures if ab.a.rates.get(k) or ab.b.rates.get(k)}
    shares = ab.a.others + ab.b.others
    worst = max(shares) if shares else None
    return Judgement(ab.candidate, metrics, worst if too_busy(worst) else None, ab.partial)
