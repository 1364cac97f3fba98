"""How other processes' use of the CPU slows a program's threads: arithmetic only.

llama.cpp runs ``t`` threads that meet at a barrier after every graph op (a few hundred
per token). Linux's scheduler shares the ``n`` cores evenly among the runnable threads:
with others keeping ``o`` cores busy, each thread holds a core ``pace = min(1, n / (t +
o))`` of the time. One thread is slowed by ``1 / pace``; threads that fit beside the
others' work (``t + o <= n``) are not slowed.

Threads that meet at a barrier lose more. An op far shorter than the scheduler's time
slice (decode's ops, a few microseconds each) advances only while all ``t`` threads hold
a core at once, about ``pace ** t`` of the time; and when the threads barely overlap it
runs no faster than one thread doing all of it at its pace, ``t / pace``: the slower of
the two. A long op (prefill's matrix products over a whole micro-batch) lets each thread
do its share while the others wait, so it loses less: the geometric mean of ``1 / pace``
and the short op's figure. Measured here (2 cores, ``yes`` processes as the others,
llama-cpp-python, prompt of 256/512 tokens and 32 decoded) against this model:

    threads, others   decode measured (model)          prefill measured (model)
    2, 1              3.02 SmolLM2, 3.33 Gemma (3.00)  1.92, 2.01 (2.12)
    2, 2              4.05, 3.91 (4.00)                3.00, 2.31 (2.83)
    1, 2              1.34, 1.58 (1.50)                1.42, 1.41 (1.50)

The ``pace ** t`` rule alone priced decode with one core held at 2.25 (25% short) and
prefill with both held at 4.00 (33-73% long).

Two users, one model: ``runner.calibration.load`` prices a quiet machine's forecast at
today's load with it, and ``runner.system.cpu_probe`` takes a busy machine's price off a
probe taken under load with it (the same model run backwards).
"""

from __future__ import annotations

import math


def thread_pace(others_cores: float, n_cores: int, threads: int) -> float:
    """The share of a core each of ``threads`` holds (0..1]."""
    runnable = max(threads, 1) + max(others_cores, 0.0)
    return min(1.0, n_cores / runnable) if n_cores > 0 else 1.0


def held_beside(others_cores: float, n_cores: int, threads: int) -> float:
    """The cores others that use ``others_cores`` while the engine is idle (their demand:
    a reading before a turn) hold once ``threads`` engine threads run beside them: all of
    it while the cores suffice, else their even share of the cores (each runnable thread
    the same, others counted as ``others_cores`` threads). A reading taken THROUGH a
    turn measures this, and the calibration's samples are priced at it, so a forecast
    made from a reading before the turn is priced at it too. Priced at the demand
    instead, with a ``yes`` on each of 2 cores (demand 2.0, held 1.18-1.33 beside one
    engine thread), the forecast TTFT was 1.42x (SmolLM2) and 1.52x (Gemma-3) of the
    measured, over 30 turns each (issue 35's full coverage run)."""
    o, t = max(others_cores, 0.0), max(threads, 1)
    if n_cores <= 0 or o + t <= n_cores:
        return o
    return o * n_cores / (o + t)


def slowdown(others_cores: float, n_cores: int, threads: int, long_ops: bool = False) -> float:
    """How many times longer work on ``threads`` threads that meet at a barrier after
    every op takes with others using ``others_cores`` of ``n_cores`` (1.0: not slowed).
    ``long_ops``: ops long beside a time slice (prefill's micro-batches), see above."""
    t = max(threads, 1)
    one = 1.0 / thread_pace(others_cores, n_cores, t)
    if t == 1 or one <= 1.0:
        return one
    short = max(one ** t, t * one)
    return math.sqrt(one * short) if long_ops else short


# Amdahl's parallel fraction of llama.cpp's CPU work per phase: on ``t`` threads a phase
# takes ``(1 - p) + p / t`` of its one-thread time. Measured here, quiet, kvtop bench
# -p 512 -n 64 at -t 1 and -t 2 (2 → 1 thread, how many times longer):
#     SmolLM2-135M Q4_1   prefill 1.89, 1.67   decode 1.83, 1.46
#     Gemma-3 270M Q4_K   prefill 1.88         decode 1.43
# and bench/forecast_accuracy.py, SmolLM2 on one thread beside a busy core against two
# threads quiet, prompts of 128, 512 and 1,536 tokens: decode 1.69, 1.67, 1.72.
# Prefill's matrix products split evenly (p = 0.9: 1.82); decode's small ops, the
# sampling and the barrier after each op less (p = 0.75: 1.6). Within 0.87-1.12 of
# every figure above.
PARALLEL_PREFILL = 0.9
PARALLEL_DECODE = 0.75


def thread_scaling(from_threads: int, to_threads: int, long_ops: bool = False) -> float:
    """How many times longer work done quietly on ``from_threads`` threads takes on
    ``to_threads`` (1.0: the same; above 1: fewer threads). ``long_ops``: prefill."""
    p = PARALLEL_PREFILL if long_ops else PARALLEL_DECODE

    def span(t: int) -> float:
        return (1.0 - p) + p / max(t, 1)

    return span(to_threads) / span(from_threads)


def free_cores(others_cores: float, n_cores: int) -> int:
    """The cores other processes leave free, at least one (a core held more than a
    quarter of the time counts as held). More engine threads than this are packed onto
    a shared core."""
    return max(1, int(n_cores - max(others_cores, 0.0) + 0.25))
