"""``kvtop tune``'s A/B runs inside the engine that holds the chat (the app's "find
faster settings", issue 39): ``MeasureSettings`` answered with ``TuneMeasured``.

Flash attention, the micro-batch, the KV cache types and the threads are a context's
settings, not the model's: each arm is a context of its own on the model the engine
has loaded (no second load of the weights, and the chat's context and KV cache are
never touched, so the next turn runs exactly as it would have). ``-ngl`` is the
model's: its arm loads the model a second time, beside the first. Timed as llama-bench times its tests
(``test_prompt``/``test_gen``): the context's depth filled once and untimed, then per
repetition everything after the depth dropped and either the prompt's P tokens
decoded in batches of ``n_batch`` or N tokens decoded one at a time, no sampling;
one warmup per arm; base and candidate alternating (ABAB...). The rounds each A/B
gets are those the time left holds (runner.policy.tune_budget); a cancel (Esc, a
turn sent, the budget) stops it at the next ``llama_decode``, keeping what was measured.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import llama_cpp

from kvtop.runner.engine.handles import Context, Model, TokenBuffer
from kvtop.runner.engine.load_params import context_params, model_params
from kvtop.runner.policy.tune_budget import budget_for, fit_reps
from kvtop.runner.policy.tune_messages import TOO_SMALL, MeasureSettings, PairRates, TuneMeasured, TuneProgress
from kvtop.runner.policy.tuning import MIN_REPS, Base, Candidate
from kvtop.runner.settings import Settings

if TYPE_CHECKING:
    from kvtop.runner.engine.engine import Engine

Emit = Callable[[object], None]


class Stopped(Exception):
    """Cancelled (Esc, a turn sent) or out of time."""


@dataclass
class Arms:
    """The contexts the A/Bs run on, keyed by their settings (threads aside: they change
    per repetition), each with its depth filled; timings for the budget's plan."""

    model: Model
    settings: Settings
    cmd: MeasureSettings
    stop: Callable[[], bool]
    open: dict[Base, Context] = field(default_factory=dict)
    models: dict[int, Model] = field(default_factory=dict)  # -ngl's other loads, by their layers
    rep_s: dict[str, float] = field(default_factory=dict)
    load_s: float = 0.0
    tokens: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:  # a load's progress callback (kept referenced): a cancel stops it
        self._progress = llama_cpp.llama_progress_callback(lambda _f, _d: not self.stop())

    @staticmethod
    def key(b: Base) -> Base:
        return replace(b, n_threads=0, n_threads_batch=0)

    def get(self, b: Base, keep: set[Base]) -> Context:
        k = self.key(b)
        if k in self.open:
            return self.open[k]
        for other in [x for x in self.open if x not in keep]:
            self.open.pop(other).close()
        c = self.cmd
        s = replace(self.settings, n_ubatch=b.n_ubatch, n_batch=b.n_batch, flash_attn=b.flash_attn,
                    cache_type_k=b.cache_type_k, cache_type_v=b.cache_type_v, n_gpu_layers=b.n_gpu_layers)
        t0 = time.monotonic()
        ctx = Context.create(self.model_for(s), context_params(s, c.depth + c.n_prompt + c.n_gen + 8))
        if ctx is None:
            raise RuntimeError("llama.cpp could not create a context with these settings")
        self.open[k] = ctx
        if c.depth:
            self.decode_batches(ctx, self.tokens[:c.depth], b)
        self.load_s = max(self.load_s, time.monotonic() - t0)
        return ctx

    def model_for(self, s: Settings) -> Model:
        """The engine's model, or for another ``-ngl`` a second load of it (kept to the end)."""
        if s.n_gpu_layers == self.settings.n_gpu_layers:
            return self.model
        if s.n_gpu_layers not in self.models:
            m = Model.load(os.path.abspath(s.model), model_params(s, self._progress))
            if m is None:
                raise RuntimeError(f"llama.cpp could not load the model with -ngl {s.n_gpu_layers}")
            self.models[s.n_gpu_layers] = m
        return self.models[s.n_gpu_layers]

    def decode_batches(self, ctx: Context, tokens: list[int], b: Base) -> None:
        llama_cpp.llama_set_n_threads(ctx.ptr, b.n_threads, b.n_threads_batch)
        buf, n_batch = TokenBuffer(tokens), max(1, b.n_batch)
        try:
            for i in range(0, len(tokens), n_batch):
                if self.stop():
                    raise Stopped
                if llama_cpp.llama_decode(ctx.ptr, buf.batch(i, min(n_batch, len(tokens) - i))) != 0:
                    raise RuntimeError("llama_decode failed while measuring")
            llama_cpp.llama_synchronize(ctx.ptr)
        finally:
            buf.close()

    def rep(self, b: Base, metric: str, keep: set[Base], n_gen: int | None = None) -> float:
        """One repetition's rate (tok/s) of ``metric`` on ``b``'s context and threads."""
        c, ctx = self.cmd, self.get(b, keep)
        llama_cpp.llama_memory_seq_rm(ctx.mem, 0, c.depth, -1)  # all after the depth: as if never computed
        t0 = time.monotonic()
        if metric == "prefill":
            self.decode_batches(ctx, self.tokens[c.depth:c.depth + c.n_prompt], b)
            n = c.n_prompt
        else:
            llama_cpp.llama_set_n_threads(ctx.ptr, b.n_threads, b.n_threads_batch)
            n = c.n_gen if n_gen is None else n_gen
            buf = TokenBuffer(self.tokens[c.depth:c.depth + 1])
            try:
                for i in range(n):
                    if self.stop():
                        raise Stopped
                    assert buf.arr is not None
                    buf.arr[0] = self.tokens[c.depth + i]
                    if llama_cpp.llama_decode(ctx.ptr, buf.single()) != 0:
                        raise RuntimeError("llama_decode failed while measuring")
                    llama_cpp.llama_synchronize(ctx.ptr)
            finally:
                buf.close()
        s = time.monotonic() - t0
        if n_gen is None:
            self.rep_s[metric] = s
        return n / s if s > 0 else 0.0

    def close(self) -> None:
        for k in list(self.open):
            self.open.pop(k).close()
        for n in list(self.models):  # after the contexts on them
            self.models.pop(n).close()


def measure_settings(model: Model, settings: Settings, cmd: MeasureSettings, emit: Emit,
                     cancel: threading.Event) -> TuneMeasured:
    """The A/Bs of ``cmd`` on ``model``: progress as they run, then what was measured."""
    t0, cpu0 = time.monotonic(), time.process_time()
    deadline = t0 + cmd.budget_s
    n_vocab = max(2, llama_cpp.llama_vocab_n_tokens(model.vocab.ptr))
    rng = random.Random(0)  # llama-bench's tokens are random too: the same ones for every arm
    grace = [0.0]  # a repetition under way at the deadline ends (the budget overrun by one at most)
    threads = [cmd.base] + [c.applied(cmd.base) for c in cmd.candidates]
    s = replace(settings, n_threads=max(b.n_threads for b in threads),
                n_threads_batch=max(b.n_threads_batch for b in threads))
    probing = [True]  # the first fill and warmup run whole: the plan's (and the too-small line's) timings
    arms = Arms(model, s, cmd, lambda: cancel.is_set() or (not probing[0] and time.monotonic() > deadline + grace[0]),
                tokens=[rng.randrange(n_vocab) for _ in range(cmd.depth + cmd.n_prompt + cmd.n_gen + 1)])
    pairs: list[PairRates] = []
    probe_s = 0.0
    skipped: list[tuple[Candidate, str]] = []
    todo = list(cmd.candidates)
    try:
        for i, cand in enumerate(todo):
            emit(TuneProgress(cmd.turn_id, i + 1, len(todo), cand.flag, time.monotonic() - t0,
                              _eta(arms, todo[i:], cmd, deadline)))
            b = cand.applied(cmd.base)
            keep = {arms.key(cmd.base), arms.key(b)}
            if i == 0:
                for m in cand.measures:  # the base's warmup, timed: the plan's figures
                    arms.rep(cmd.base, m, keep)
                    grace[0] = max(grace[0], arms.rep_s[m])
                probing[0] = False
                probe_s = time.monotonic() - t0
            reps = fit_reps(arms.rep_s, cand.measures, arms.load_s, arms.key(b) not in arms.open,
                            deadline - time.monotonic(), cmd.reps)
            if reps is not None and reps < MIN_REPS:
                if not pairs:  # not even the first, the most promising: what budget would hold it
                    need = budget_for(time.monotonic() - t0, arms.rep_s, cand.measures, arms.load_s,
                                      arms.key(b) not in arms.open)
                    skipped.append((cand, f"{TOO_SMALL} {need}"))
                    break
                skipped.append((cand, "the budget ran out"))
                continue
            pair = _ab(arms, cmd.base, cand, keep, reps or cmd.reps, grace, deadline)
            pairs.append(pair)
    except Stopped:  # what was measured is kept
        if not pairs and not cancel.is_set() and todo:  # the budget ran out before the first A/B
            skipped.append((todo[0], f"{TOO_SMALL} {_first_need(arms, todo[0], time.monotonic() - t0)}"))
    finally:
        arms.close()
    done = {p.candidate for p in pairs} | {c for c, _ in skipped}
    why = "cancelled" if cancel.is_set() else "the budget ran out"
    skipped += [(c, why) for c in cmd.candidates if c not in done]
    return TuneMeasured(cmd.turn_id, tuple(pairs), tuple(skipped), cancel.is_set(), time.monotonic() - t0,
                        time.process_time() - cpu0, probe_s, grace[0])


def _first_need(arms: Arms, cand: Candidate, spent: float) -> int:
    """The budget the first A/B needs: from its timings, or (cut before they were all
    taken) three times what the depth's fill and the warmups so far took, at least."""
    if all(m in arms.rep_s for m in cand.measures):
        return budget_for(spent, arms.rep_s, cand.measures, arms.load_s, True)
    return int(5 * -(-3 * spent // 5)) + 5


def _eta(arms: Arms, todo: list[Candidate], cmd: MeasureSettings, deadline: float) -> float | None:
    if not arms.rep_s:
        return None
    one = {m: arms.rep_s.get(m, max(arms.rep_s.values())) for m in ("decode", "prefill")}
    need = sum(arms.load_s + sum(one[m] for m in c.measures) * (1 + 2 * cmd.reps) for c in todo)
    return float(min(need, max(0.0, deadline - time.monotonic())))


def _ab(arms: Arms, base: Base, cand: Candidate, keep: set[Base], reps: int, grace: list[float],
        deadline: float) -> PairRates:
    b = cand.applied(base)
    rates: dict[Base, dict[str, list[float]]] = {base: {}, b: {}}
    partial = True
    try:
        for m in cand.measures:  # the candidate's warmup (the base warmed up on its context already)
            arms.rep(b, m, keep, n_gen=1)
        for i in range(reps):
            if i and deadline - time.monotonic() < 2 * sum(arms.rep_s.get(m, 0.0) for m in cand.measures):
                if i < MIN_REPS:
                    raise Stopped
                break
            for arm in (base, b):
                for m in cand.measures:
                    rates[arm].setdefault(m, []).append(arms.rep(arm, m, keep))
                    grace[0] = max(grace[0], arms.rep_s[m])
        partial = False
    except Stopped:
        if any(rates[b].values()):  # what it measured is kept, marked partial
            return _pair(cand, rates[base], rates[b], True)
        raise
    return _pair(cand, rates[base], rates[b], partial)


def _pair(cand: Candidate, a: dict[str, list[float]], b: dict[str, list[float]], partial: bool) -> PairRates:
    return PairRates(cand, tuple((k, tuple(v)) for k, v in a.items()), tuple((k, tuple(v)) for k, v in b.items()),
                     partial)


class Cancels(Protocol):
    """The child's ``CancelState``: which ids are cancelled, and the event it raises."""

    event: threading.Event

    def begin(self, turn_id: int) -> bool: ...

    def end(self) -> None: ...


def run_measure(engine: Engine, cmd: MeasureSettings, emit: Emit, cancel: Cancels) -> None:
    """``MeasureSettings`` on a loaded engine, cancelled as a turn is."""
    if not cancel.begin(cmd.turn_id):
        emit(TuneMeasured(cmd.turn_id, (), tuple((c, "cancelled") for c in cmd.candidates), True, 0.0, 0.0))
        return
    try:
        model = engine._parts()[0]
        emit(measure_settings(model, engine.settings, cmd, emit, cancel.event))
    finally:
        cancel.end()
