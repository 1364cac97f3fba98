"""``kvtop tune``'s decisions, pure: which settings to try, and when one has won.

The candidates are the settings that change speed without changing the answers:
flash attention on/off, decode threads (``-t``), prefill threads (``-tb``), the
micro-batch (``-ub``), ``-ngl`` where a GPU is there, and the KV cache types, whose
speed is measured here while their precision is not (they are never in the
recommended line). Each is measured against the user's own settings as an
interleaved A/B: base, candidate, base, candidate, ... so a machine that slows down
or speeds up during the run moves both arms alike.

The rule (``judge``): a metric's gain is the candidate's mean rate over the base's,
and its spread is the larger run-to-run spread of the two arms, (max - min) / mean of
each arm's repetitions, at least ``MIN_SPREAD``. A gain beyond the spread is faster
(or slower); within it, the same. A candidate wins when some metric it measured is
faster beyond its spread and its gains together (their geometric mean) are above 1
(decode 1.70x outweighs prefill 0.97x; decode 1.05x does not outweigh prefill 0.70x),
on a machine that was not busy. One repetition per arm measures no spread: it cannot
win.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

MIN_SPREAD = 0.03  # 3%: below this, two arms of one setting differ by chance on a quiet machine
MIN_REPS = 2  # repetitions per arm for a spread


@dataclass(frozen=True)
class Base:
    """The user's settings the candidates change (threads resolved: no 0)."""

    n_threads: int
    n_threads_batch: int
    n_ubatch: int
    n_batch: int
    flash_attn: str  # on, off, auto
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_gpu_layers: int = 0


@dataclass(frozen=True)
class Candidate:
    """One change to the base: its flags as the user types them, the settings fields it
    sets, what it is measured on ("decode", "prefill"), and its group (one winner each)."""

    flag: str
    changes: tuple[tuple[str, object], ...]
    measures: tuple[str, ...]
    group: str
    precision: bool = False  # it changes what the cache holds (KV types): never recommended

    def applied(self, base: Base) -> Base:
        from dataclasses import replace

        return replace(base, **dict(self.changes))  # type: ignore[arg-type]


BOTH = ("decode", "prefill")


def thread_values(n_cores: int) -> list[int]:
    """Thread counts worth trying on ``n_cores``: 1, a quarter, half and all of them."""
    return sorted({v for v in (1, n_cores // 4, n_cores // 2, n_cores) if v >= 1})


def candidate_list(base: Base, n_cores: int, gpu: bool, n_prompt: int, n_layers: int = 0) -> list[Candidate]:
    """The candidates for ``base`` on a machine of ``n_cores`` (``gpu``: a GPU the build
    can use), in the order they are measured (the likeliest to matter first);
    ``n_prompt``: the prefill test's tokens (a micro-batch is tried only below it)."""
    out: list[Candidate] = []
    fa = "off" if base.flash_attn in ("on", "auto") else "on"
    out.append(Candidate(f"-fa {fa}", (("flash_attn", fa),), BOTH, "flash_attn"))
    for t in thread_values(n_cores):
        if t != base.n_threads:
            out.append(Candidate(f"-t {t}", (("n_threads", t),), ("decode",), "threads"))
    for t in thread_values(n_cores):
        if t != base.n_threads_batch:
            out.append(Candidate(f"-tb {t}", (("n_threads_batch", t),), ("prefill",), "threads_batch"))
    used = min(base.n_ubatch, base.n_batch, n_prompt)
    for ub in (used // 2, used * 2):
        if 32 <= ub <= min(base.n_batch, n_prompt) and ub != used:
            out.append(Candidate(f"-ub {ub}", (("n_ubatch", ub),), ("prefill",), "ubatch"))
    if gpu:
        ngl = 0 if base.n_gpu_layers else 99
        out.append(Candidate(f"-ngl {ngl}", (("n_gpu_layers", ngl),), BOTH, "ngl"))
    if base.cache_type_k == "f16" and base.cache_type_v == "f16" and base.flash_attn != "off":  # a quantised V needs it
        kv = "q8_0"
        out.append(Candidate(f"-ctk {kv} -ctv {kv}", (("cache_type_k", kv), ("cache_type_v", kv)), BOTH, "kv",
                             precision=True))
    return out


def spread(xs: Sequence[float]) -> float | None:
    """One arm's run-to-run spread: (max - min) / mean; None for fewer than ``MIN_REPS``."""
    if len(xs) < MIN_REPS:
        return None
    m = sum(xs) / len(xs)
    return (max(xs) - min(xs)) / m if m > 0 else None


@dataclass(frozen=True)
class Metric:
    """One metric of one A/B: both arms' rates (tok/s) per repetition."""

    base: tuple[float, ...]
    cand: tuple[float, ...]

    @property
    def gain(self) -> float | None:
        if not self.base or not self.cand:
            return None
        b, c = sum(self.base) / len(self.base), sum(self.cand) / len(self.cand)
        return c / b if b > 0 else None

    @property
    def noise(self) -> float | None:
        sa, sb = spread(self.base), spread(self.cand)
        if sa is None or sb is None:
            return None
        return max(sa, sb, MIN_SPREAD)

    @property
    def verdict(self) -> str:
        """"faster", "slower", "same", or "unknown" (no spread measured)."""
        g, n = self.gain, self.noise
        if g is None or n is None:
            return "unknown"
        if g > 1 + n:
            return "faster"
        if g < 1 / (1 + n):
            return "slower"
        return "same"


@dataclass(frozen=True)
class Judgement:
    """One candidate's A/B: its metrics, and whether the machine was busy or the run cut short."""

    candidate: Candidate
    metrics: dict[str, Metric] = field(default_factory=dict)
    busy: float | None = None  # other processes' largest share of the CPU during an arm, when too busy
    partial: bool = False

    @property
    def wins(self) -> bool:
        verdicts = [m.verdict for m in self.metrics.values()]
        return (self.busy is None and "faster" in verdicts and "unknown" not in verdicts and self.score > 1.0)

    @property
    def loses(self) -> bool:
        return self.busy is None and "slower" in [m.verdict for m in self.metrics.values()] and not self.wins

    @property
    def score(self) -> float:
        """The geometric mean of its gains (the ranking within a group)."""
        gains = [g for m in self.metrics.values() if (g := m.gain)]
        return math.exp(sum(math.log(g) for g in gains) / len(gains)) if gains else 0.0

    def gains_text(self, depth: int) -> str:
        """"decode 1.70x, prefill 0.97x at depth 512"."""
        parts = [f"{k} {g:.2f}x" for k in BOTH if k in self.metrics and (g := self.metrics[k].gain) is not None]
        return ", ".join(parts) + f" at depth {depth}" if parts else "not measured"


def recommend(judged: Sequence[Judgement]) -> list[Judgement]:
    """The winners to put in the recommended line: the best of each group (none that
    changes the cache's precision)."""
    best: dict[str, Judgement] = {}
    for j in judged:
        if j.wins and not j.candidate.precision:
            g = j.candidate.group
            if g not in best or j.score > best[g].score:
                best[g] = j
    return list(best.values())
