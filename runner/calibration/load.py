"""Forecasts at today's load: what the CPU share other processes take now costs a turn.

The calibration's forecast is a quiet machine's (each sample brought to quiet at its
own load: runner.calibration.pace). On a busy machine that forecast was 5-27x short
(181 ms forecast, 3.50 s measured) although kvtop measured the load it was
forecasting through. This module prices that load; it is arithmetic only.

The model (``runner.system.cpu_pace``; the CPU probe uses it too). llama.cpp runs
``t`` threads that meet at a barrier after every graph op (a few hundred per token). Linux's scheduler shares the ``n`` cores evenly among the
runnable threads: with others keeping ``o`` cores busy, each engine thread holds a
core ``pace = min(1, n / (t + o))`` of the time. One thread is slowed by ``1 / pace``;
threads that meet at a barrier lose more, decode's short ops most (``max(1 / pace **
t, t / pace)``), prefill's long ones less (the geometric mean of that and ``1 / pace``),
as measured (the table in ``runner.system.cpu_pace``). Threads that fit beside the
others' work (``t + o <= n``) are not slowed at all.

Threads that follow the load. Linux shares the CPU between sessions first (autogroup)
and kvtop's engine runs in a session of its own, so when its threads outnumber the
cores other work leaves free the scheduler packs them onto a shared core where each op
waits for a time slice: SmolLM2 with -t 2 beside one busy process of another session
decoded 0.90 tok/s (-t 1: 45.6; quiet: 71.5). No price reaches that. So when kvtop
chose the threads (no ``-t``), each turn runs on the free cores (``turn_threads``: the
app decides with it when it sends a turn, the engine applies it, and the forecast is
priced with it at the same load) and is priced on them: the fewer threads' quiet
cost (``thread_scaling``) times the load's price on those threads. With ``-t`` the
user's threads stay, and the forecast says that they outnumber the free cores.

A load under the busy test (``runner.calibration.busy``: a quarter of the CPU) is not
priced, and samples taken at such loads are not priced either: the forecast holds it.

Only the CPU's work is slowed: the share of the model a GPU computes (``-ngl``) runs
at the GPU's pace whatever the CPU does, so the factor applies to the CPU's share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvtop.runner.calibration.busy import too_busy
from kvtop.runner.calibration.forecast import Forecast
from kvtop.runner.calibration.pace import Pace, price
from kvtop.runner.calibration.store import Held
from kvtop.runner.policy.tune_evidence import TuneEvidence, advise
from kvtop.runner.system.cpu_pace import free_cores, held_beside, slowdown, thread_pace, thread_scaling  # noqa: F401 (the model above; imported from here too)

NOTABLE = 1.05  # a forecast this much slower at today's load says so; below, it is the quiet one


@dataclass(frozen=True)
class CPULoad:
    """What other processes used of this machine over the last seconds."""

    others_cores: float  # cores kept busy by processes other than kvtop and its engine
    n_cores: int

    @property
    def share(self) -> float:
        return min(max(self.others_cores / self.n_cores, 0.0), 1.0) if self.n_cores > 0 else 0.0

    @classmethod
    def of_share(cls, share: float, n_cores: int) -> CPULoad:
        return cls(max(share, 0.0) * n_cores, n_cores)


def mixed(factor: float, cpu_fraction: float) -> float:
    """The factor on a phase whose ``cpu_fraction`` of the time is the CPU's work."""
    f = min(max(cpu_fraction, 0.0), 1.0)
    return (1.0 - f) + f * factor


@dataclass(frozen=True)
class LoadedEngine:
    """The engine's side: its threads for decode and prefill, and the CPU's share of the
    work (1.0 without a GPU; the layers left on the CPU with ``-ngl``)."""

    threads: int
    threads_batch: int
    cpu_fraction: float = 1.0
    fits: bool = False  # kvtop chose the threads (no -t): each turn runs on the free cores (turn_threads)


def turn_threads(threads: int, threads_batch: int, load: CPULoad | None, fits: bool = True) -> tuple[int, int]:
    """The threads (decode, prefill) a turn runs on: the engine's, or, when kvtop chose
    them (``fits``) and the load passes the busy test, no more than the free cores. The
    app decides with it when it sends a turn (tui/turn/forecasting.py ``next_turn_threads``;
    runner.engine.engine applies it) and ``at_load`` prices the forecast with it."""
    if not fits or load is None or not too_busy(load.share):
        return threads, threads_batch
    free = free_cores(load.others_cores, load.n_cores)
    return max(1, min(threads, free)), max(1, min(threads_batch, free))


NEAR_CORES = 0.25  # a load read before a turn this close to an earlier one's is "the same load"


def held_load(others_cores: float, n_cores: int, threads: int, held: Sequence[Held] = (), batch: bool = False) -> float:
    """The cores others that used ``others_cores`` before a turn will hold through it,
    beside ``threads`` engine threads: what earlier turns at the same load and threads
    showed (``held``: the calibration's (before, through, threads, threads_batch), the
    median ratio of through to before), else the even-share rule
    (runner.system.cpu_pace ``held_beside``). The samples are priced at what a turn's
    load held through it, so the forecast is priced in the same units. Learned, because
    a reading before a turn cannot tell two ``yes`` (demand 2 cores: they held 1.18-1.33
    beside one engine thread) from a dozen runnable neighbours (85% before, 85% through)."""
    import statistics

    ratios = [h / b for b, h, t, tb in held  # threads 0: not recorded (the engine's own)
              if (tb if batch else t) in (threads, 0) and b > 0.05 and abs(b - others_cores) <= NEAR_CORES]
    if not ratios:
        return held_beside(others_cores, n_cores, threads)
    return min(max(others_cores * statistics.median(ratios), 0.0), float(n_cores))


def at_load(fc: Forecast, load: CPULoad | None, engine: LoadedEngine, pace: Pace | None = None,
            held: Sequence[Held] = ()) -> Forecast:
    """``fc`` (a quiet machine's) priced at ``load``: the prefill by the prefill threads'
    price, the fixed costs (template, tokenize: one thread) by one thread's, decode by
    the decode threads'; on the threads the turn will run on (``turn_threads``), with
    what fewer threads cost on a quiet machine. The price is runner.calibration.pace's,
    at the strength the calibration fitted (``pace``; None: the shape as measured), the
    one its busy samples were brought to quiet by. The quiet figures stay in
    ``quiet_ttft_s``/``quiet_reply_s``."""
    if load is None or fc.ttft_s is None or not too_busy(load.share):
        return fc  # under the busy test no price applies (the samples were not priced there either)
    p = pace or Pace()
    o, n = load.others_cores, load.n_cores
    t, tb = turn_threads(engine.threads, engine.threads_batch, load, engine.fits and engine.cpu_fraction > 0)
    # the load read before the turn, as what it will hold through it (``held_load``):
    # the samples were priced at what their turns' loads held
    k_pre = price(held_load(o, n, tb, held, batch=True), n, tb, engine.threads_batch, True, p.g_prefill,
                  engine.cpu_fraction)
    k_one = price(held_beside(o, n, 1), n, 1, 0, False, p.g_prefill)  # template and tokenizer: one CPU thread
    k_tok = price(held_load(o, n, t, held), n, t, engine.threads, False, p.g_decode, engine.cpu_fraction)
    pre = fc.prefill_s * k_pre if fc.prefill_s is not None else None
    fixed = fc.ttft_s - (fc.prefill_s or 0.0)
    ttft = (pre or 0.0) + fixed * k_one
    tok_s = fc.decode_tok_s / k_tok if fc.decode_tok_s else None
    reply = ttft + max(fc.reply_tokens - 1, 0) / tok_s if tok_s else None
    return replace(fc, ttft_s=ttft, prefill_s=pre, prefill_tok_s=fc.new_tokens / pre if pre else None,
                   decode_tok_s=tok_s, reply_s=reply, quiet_ttft_s=fc.ttft_s, quiet_reply_s=fc.reply_s,
                   others_cpu=load.share, free_cores=packed_free_cores(o, n, replace(engine, threads=t, threads_batch=tb)),
                   threads=(t, tb) if (t, tb) != (engine.threads, engine.threads_batch) else None)


def packed_free_cores(others_cores: float, n_cores: int, engine: LoadedEngine) -> int | None:
    """The cores other processes leave free when the engine's CPU threads outnumber them
    (None when they fit). Linux shares the CPU between sessions first (autogroup) and
    kvtop's engine runs in a session of its own, so its threads are then packed onto a
    shared core where each op waits for a time slice: measured here, SmolLM2 with -t 2
    beside one busy process of another session decoded 0.90 tok/s (-t 1: 45.6; quiet:
    71.5) and prefilled 30.5 tok/s (-t 1: 74.1). The price above does not reach that, so
    the forecast says so instead of pretending."""
    if engine.cpu_fraction <= 0 or max(engine.threads, engine.threads_batch) <= 1:
        return None
    free = free_cores(others_cores, n_cores)
    return free if max(engine.threads, engine.threads_batch) > free else None


def slowed(fc: Forecast) -> bool:
    """Whether ``fc`` is notably slower than the quiet machine's (worth saying)."""
    return (fc.quiet_ttft_s is not None and fc.ttft_s is not None and fc.quiet_ttft_s > 0
            and fc.ttft_s / fc.quiet_ttft_s >= NOTABLE)


def ttft_texts(fc: Forecast) -> list[str]:
    """The TTFT as the border says it, longest first: with today's load and the quiet
    machine's figure when the load slows it notably."""
    from kvtop.runner.units import fmt_seconds

    plain = f"TTFT ≈ {fmt_seconds(fc.ttft_s)}"
    if not slowed(fc):
        return [plain]
    quiet = fmt_seconds(fc.quiet_ttft_s)
    return [f"{plain} at today's load ({quiet} on a quiet machine)", f"{plain} at today's load ({quiet} quiet)",
            plain]


def load_note(fc: Forecast, tuned: TuneEvidence | None = None) -> str:
    """One line on what the load costs (``""`` when it costs little or was not priced);
    its ``-t`` advice with ``kvtop tune``'s evidence (``tuned``) when there is some."""

    from kvtop.runner.units import fmt_seconds

    if not slowed(fc) or fc.others_cpu is None:
        return ""
    line = (f"at today's load: other processes use {fc.others_cpu:.0%} of the CPU "
            f"(TTFT {fmt_seconds(fc.quiet_ttft_s)} on a quiet machine)")
    if fc.threads is not None:
        line += f"; {threads_text(fc.threads)}"
    if fc.free_cores is not None:
        line += (f"; more threads than the {fc.free_cores} free core{'s' if fc.free_cores != 1 else ''}: "
                 f"expect far slower still; {advise(f'-t {fc.free_cores}', tuned, conditional=True)}")
    return line


def threads_text(threads: tuple[int, int]) -> str:
    """What kvtop does with its threads at this load (``Forecast.threads``)."""
    t, tb = threads
    on = f"{t} thread{'s' if t != 1 else ''}" if t == tb else f"{t} decode and {tb} prefill threads"
    return f"runs on {on}, the free cores (-t N keeps N)"
