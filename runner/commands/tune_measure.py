"""``kvtop tune``'s measurement: interleaved A/B runs on kvtop's engine, on llama-bench's
timing rules, within a budget.

As ``kvtop bench`` times them (runner.commands.bench): a prefill repetition is the
engine's time for the prompt's P tokens after a context of D tokens is filled (the fill
untimed, its tokens cached), a decode repetition N decodes after the same D tokens,
from the first sampled token to the N+1st. Each arm is warmed up once before its
repetitions. The base and the candidate alternate, one repetition each (ABAB...).

Threads change per turn (``llama_set_n_threads``, as the app's turns on a busy machine
do): both arms of a ``-t``/``-tb`` A/B run on one load with the most threads they use.
Any other candidate is a load of its own, beside the base's (the weights are mmap-ed:
both processes read the same pages). A deadline (the budget) cancels a turn in flight;
Ctrl+C stops the run where it is; what was measured is kept either way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kvtop.runner.commands.bench import BenchError, open_engine, token_stream
from kvtop.runner.policy.tuning import Base, Candidate, Judgement, Metric

if TYPE_CHECKING:
    from kvtop.runner.events import Loaded, TurnMetrics
    from kvtop.runner.process.blocking import BlockingEngine
    from kvtop.runner.settings import Settings


class OutOfTime(Exception):
    """The budget ran out during a turn (it was cancelled) or before the next one."""


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


class Clock:
    """The budget's deadline, and a watchdog that cancels the turn in flight once it runs
    ``grace`` seconds past it (the longest repetition so far: a measurement under way at
    the deadline ends, so the budget is overrun by at most one measurement)."""

    def __init__(self, budget_s: float):
        self.start = time.monotonic()
        self.deadline = self.start + budget_s
        self.grace = 0.0
        self.expired = False
        self._engine: BlockingEngine | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="kvtop-tune-clock").start()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def _watch(self) -> None:
        while not self._stopped.wait(0.05):
            if time.monotonic() >= self.deadline + self.grace:
                self._expire()
                return

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._engine is not None:
                self._engine.cancel()

    def running(self, eng: BlockingEngine | None) -> None:
        with self._lock:
            self._engine = eng
        if eng is not None and self.expired:
            raise OutOfTime

    def stop(self) -> None:
        self._stopped.set()


class Engines:
    """The loads an A/B needs, keyed by their settings (threads aside), each started,
    its depth filled and warmed up once; at most ``keep`` stay open (the base's first)."""

    def __init__(self, settings: Settings, sizes: Sizes, clock: Clock, max_threads: tuple[int, int],
                 on_load: Callable[[str], None] | None = None):
        self.settings = replace(settings, n_ctx=sizes.n_ctx, n_threads=max_threads[0], n_threads_batch=max_threads[1],
                                threads_why="set by kvtop tune")
        self.sizes = sizes
        self.clock = clock
        self.open: dict[Base, tuple[BlockingEngine, Loaded, list[int]]] = {}
        self.on_load = on_load or (lambda _s: None)
        self.rep_s: dict[str, float] = {}  # the last repetition's seconds of each metric
        self.warmed: set[tuple[Base, str]] = set()  # (arm, metric) warmed up on its load
        self.load_s = 0.0  # the longest load so far (start, depth fill)

    def load_key(self, b: Base) -> Base:
        return replace(b, n_threads=0, n_threads_batch=0)

    def get(self, b: Base, keep: set[Base]) -> tuple[BlockingEngine, Loaded, list[int]]:
        from kvtop.runner.process.contract import EngineUnavailable

        k = self.load_key(b)
        if k in self.open:
            return self.open[k]
        self.close(but=keep)
        s = replace(self.settings, n_ubatch=b.n_ubatch, n_batch=b.n_batch, flash_attn=b.flash_attn,
                    cache_type_k=b.cache_type_k, cache_type_v=b.cache_type_v, n_gpu_layers=b.n_gpu_layers)
        self.on_load(f"fa {b.flash_attn}, ub {b.n_ubatch}, ctk {b.cache_type_k}, ctv {b.cache_type_v}, "
                     f"ngl {b.n_gpu_layers}")
        t0 = time.monotonic()
        eng = open_engine(s, in_process=False)
        try:
            loaded = eng.start(lambda e: None)
            stream = token_stream(eng, self.sizes.depth + self.sizes.n_prompt + 2)
            if self.sizes.depth:
                _turn(self.clock, eng, stream[:self.sizes.depth], 1, (s.n_threads, s.n_threads_batch))
            self.load_s = max(self.load_s, time.monotonic() - t0)
        except EngineUnavailable as exc:
            eng.close()
            raise BenchError(str(exc)) from None
        except BaseException:
            eng.close()
            raise
        self.open[k] = (eng, loaded, stream)
        return self.open[k]

    def fit(self, cand: Candidate, new_load: bool, want: int) -> int | None:
        """The rounds of an A/B of ``cand`` the time left holds (None: not known yet)."""
        from kvtop.runner.policy.tune_budget import fit_reps

        return fit_reps(self.rep_s, cand.measures, self.load_s, new_load, self.clock.left(), want)

    def close(self, but: set[Base] | None = None) -> None:
        for k in [k for k in self.open if not but or k not in but]:
            self.open.pop(k)[0].close()
            self.warmed = {w for w in self.warmed if self.load_key(w[0]) != k}


def _turn(clock: Clock, eng: BlockingEngine, tokens: list[int], n_predict: int, threads: tuple[int, int]) -> TurnMetrics:
    from kvtop.runner.events import TurnRefused

    clock.running(eng)
    try:
        done = eng.generate(tokens, lambda e: None, n_predict=n_predict, ignore_eog=True, threads=threads)
    finally:
        clock.running(None)
    if clock.expired:
        raise OutOfTime
    if isinstance(done, TurnRefused):
        raise BenchError(done.reason)
    return done.metrics


def one_rep(clock: Clock, eng: BlockingEngine, stream: list[int], sizes: Sizes, b: Base, metric: str) -> float:
    """One repetition's rate (tok/s) of ``metric`` on ``eng`` with ``b``'s threads."""
    d, threads = sizes.depth, (b.n_threads, b.n_threads_batch)
    if metric == "decode":
        n = sizes.n_gen
        m = _turn(clock, eng, stream[:max(d, 1)], n + 1, threads)
        if not m.decode_tok_s or m.decode_tokens < n + 1:
            raise BenchError(f"the engine generated {m.decode_tokens:,} tokens, not {n + 1:,}")
        return float(m.decode_tok_s)
    p = sizes.n_prompt
    if d:
        _turn(clock, eng, stream[:d], 1, threads)  # the depth, cached but for its last token: untimed
    else:
        eng.reset()
    m = _turn(clock, eng, stream[:d + p], 1, threads)
    if m.prefill_tokens != p or not m.prefill_s:
        raise BenchError(f"the engine computed {m.prefill_tokens:,} prompt tokens, not {p:,}")
    return p / m.prefill_s


def timed_rep(clock: Clock, engines: Engines, eng: BlockingEngine, stream: list[int], b: Base, metric: str) -> float:
    """One repetition, its time kept as the next estimate (and the clock's grace)."""
    t0 = time.monotonic()
    rate = one_rep(clock, eng, stream, engines.sizes, b, metric)
    engines.rep_s[metric] = time.monotonic() - t0
    clock.grace = max(clock.grace, engines.rep_s[metric])
    return rate


def probe(clock: Clock, engines: Engines, base: Base, cand: Candidate) -> None:
    """Load the base, fill its depth and time one repetition of each of ``cand``'s
    metrics (its warmup): what the first A/B's plan is made from."""
    eng, _loaded, stream = engines.get(base, {engines.load_key(base), engines.load_key(cand.applied(base))})
    for metric in cand.measures:
        if clock.left() <= 0:
            raise OutOfTime
        if (base, metric) not in engines.warmed:
            timed_rep(clock, engines, eng, stream, base, metric)
            engines.warmed.add((base, metric))


def run_arm(clock: Clock, engines: Engines, arm: ArmRun, keep: set[Base], metrics: tuple[str, ...]) -> None:
    """One repetition of each metric on ``arm`` (after a warmup on its load, the first time)."""
    from kvtop.runner.commands.bench_busy import cpu_reading, others_share

    eng, loaded, stream = engines.get(arm.base, keep)
    arm.loaded = loaded
    for metric in metrics:
        if (arm.base, metric) not in engines.warmed:
            one_rep(clock, eng, stream, replace(engines.sizes, n_gen=1), arm.base, metric)
            engines.warmed.add((arm.base, metric))
    for metric in metrics:
        start = cpu_reading(eng, loaded)
        rate = timed_rep(clock, engines, eng, stream, arm.base, metric)
        share = others_share(start, eng, loaded)
        arm.rates.setdefault(metric, []).append(rate)
        if share is not None:
            arm.others.append(share)


def run_ab(clock: Clock, engines: Engines, base: Base, cand: Candidate, out: list[ABRun], reps: int) -> ABRun:
    """Base and candidate alternating for ``reps`` rounds; appended to ``out`` at once,
    so a stop mid-way keeps what it measured (marked partial). A round the time left
    does not hold is not started: with ``MIN_REPS`` rounds done the A/B is whole."""
    from kvtop.runner.policy.tuning import MIN_REPS

    b = cand.applied(base)
    ab = ABRun(cand, ArmRun(base), ArmRun(b), partial=True)
    out.append(ab)
    keep = {engines.load_key(base), engines.load_key(b)}
    engines.close(but=keep)  # the last candidate's load, if this one is another
    for i in range(reps):
        if i and clock.left() < 2 * sum(engines.rep_s.get(m, 0.0) for m in cand.measures):
            if i >= MIN_REPS:
                break
            raise OutOfTime
        for arm in (ab.a, ab.b):
            run_arm(clock, engines, arm, keep, cand.measures)
    ab.partial = False
    return ab


def judgement(ab: ABRun) -> Judgement:
    from kvtop.runner.calibration.busy import too_busy

    metrics = {k: Metric(tuple(ab.a.rates.get(k, [])), tuple(ab.b.rates.get(k, [])))
               for k in ab.candidate.measures if ab.a.rates.get(k) or ab.b.rates.get(k)}
    shares = ab.a.others + ab.b.others
    worst = max(shares) if shares else None
    return Judgement(ab.candidate, metrics, worst if too_busy(worst) else None, ab.partial)
