"""``kvtop tune``'s run: one engine (its child process) loads the model, and its A/Bs run
in it as the app's "find faster settings" runs them (``MeasureSettings``,
runner/engine/tune_in_engine.py): a context per arm on the one load, llama-bench's
timing, the rounds the budget holds. Ctrl+C cancels the run in the engine and waits
for what it measured (a second Ctrl+C stops waiting). The busy rule's reading is the
other processes' share of the CPU over the run, measured here as ``kvtop bench`` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kvtop.runner.commands.tune_measure import ABRun, ArmRun

if TYPE_CHECKING:
    from kvtop.runner.commands.tune_measure import Sizes
    from kvtop.runner.events import Loaded
    from kvtop.runner.policy.tune_messages import TuneMeasured
    from kvtop.runner.policy.tuning import Base, Candidate
    from kvtop.runner.settings import Settings

REQUEST_ID = 1


@dataclass
class EngineRun:
    runs: list[ABRun] = field(default_factory=list)
    skipped: list[tuple[Candidate, str]] = field(default_factory=list)
    stopped: bool = False
    too_small: int | None = None  # the budget that would hold the first A/B, when this one did not


def ab_runs(m: TuneMeasured, loaded: Loaded, base: Base, others: float | None) -> list[ABRun]:
    """The engine's rates as ``kvtop tune``'s A/B runs (its rows and judgements)."""
    out = []
    for p in m.pairs:
        share = [others] if others is not None else []
        a = ArmRun(base, {k: list(v) for k, v in p.base}, list(share), loaded)
        b = ArmRun(p.candidate.applied(base), {k: list(v) for k, v in p.cand}, list(share), loaded)
        out.append(ABRun(p.candidate, a, b, partial=p.partial))
    return out


def run_in_engine(settings: Settings, base: Base, cands: list[Candidate], sizes: Sizes, budget_s: float,
                  say: Callable[[str], None]) -> EngineRun:
    """Load, measure within ``budget_s`` (the load included), close."""
    from kvtop.runner.commands.bench import BenchError, open_engine
    from kvtop.runner.commands.bench_busy import cpu_reading, others_share
    from kvtop.runner.policy.tune_messages import TOO_SMALL, MeasureSettings, TuneMeasured, TuneProgress
    from kvtop.runner.process.contract import EngineUnavailable

    t0 = time.monotonic()
    s = replace(settings, n_ctx=sizes.n_ctx, threads_why="set by kvtop tune")
    eng = open_engine(s, in_process=False)
    out = EngineRun()
    try:
        say(f"loading ({s.model})")
        try:
            loaded = eng.start()
        except EngineUnavailable as exc:
            raise BenchError(str(exc)) from None
        left = budget_s - (time.monotonic() - t0)
        start = cpu_reading(eng, loaded)

        def progress(e: object) -> None:
            if isinstance(e, TuneProgress):
                eta = f", about {e.eta_s:.0f} s left" if e.eta_s is not None else ""
                say(f"A/B {e.index}/{e.total}: {e.flag} against your settings{eta}")

        eng.client.submit(MeasureSettings(REQUEST_ID, base, tuple(cands), sizes.depth, sizes.n_prompt, sizes.n_gen,
                                          sizes.reps, max(left, 0.0)))

        def done(e: object) -> bool:
            return isinstance(e, TuneMeasured) and e.turn_id == REQUEST_ID

        try:
            m = eng._wait(done, progress)
        except KeyboardInterrupt:  # cancel in the engine, and take what it measured
            out.stopped = True
            eng.client.cancel(REQUEST_ID)
            m = eng._wait(done, progress)
        except EngineUnavailable as exc:
            raise BenchError(str(exc)) from None
        assert isinstance(m, TuneMeasured)  # what done() waits for
        out.runs = ab_runs(m, loaded, base, others_share(start, eng, loaded))
        for c, why in m.skipped:
            if why.startswith(TOO_SMALL):
                out.too_small = int(why.rsplit(" ", 1)[1]) + int(budget_s - left + 0.999)
                why = f"one A/B needs --budget {out.too_small} here"
            out.skipped.append((c, "stopped by Ctrl+C" if out.stopped and why == "cancelled" else why))
    finally:
        eng.close()
    return out
