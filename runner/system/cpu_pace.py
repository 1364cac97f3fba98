"""How other processes' use of the CPU slows a program's threads: arithmetic only.

llama.cpp runs ``t`` threads that meet at a barrier after every graph op (a few hundred
per token). Linux's scheduler shares the ``n`` cores evenly among the runnable threads:
with others keeping ``o`` cores busy, each thread holds a core ``pace = min(1, n / (t +
o))`` of the time. An op advances only while all ``t`` threads hold a core (a thread
that is off its core stalls the barrier; the others spin), which they do about ``pace **
t`` of the time, so the work takes ``1 / pace ** t`` as long. One thread is slowed by
``1 / pace``; threads that fit beside the others' work (``t + o <= n``) are not slowed.

Two users, one model: ``runner.calibration.load`` prices a quiet machine's forecast at
today's load with it, and ``runner.system.cpu_probe`` takes a busy machine's price off a
probe taken under load with it (the same model run backwards).
"""

from __future__ import annotations


def thread_pace(others_cores: float, n_cores: int, threads: int) -> float:
    """The share of a core each of ``threads`` holds (0..1]."""
    runnable = max(threads, 1) + max(others_cores, 0.0)
    return min(1.0, n_cores / runnable) if n_cores > 0 else 1.0


def slowdown(others_cores: float, n_cores: int, threads: int) -> float:
    """How many times longer work on ``threads`` threads that meet at a barrier after
    every op takes with others using ``others_cores`` of ``n_cores`` (1.0: not slowed)."""
    return 1.0 / thread_pace(others_cores, n_cores, threads) ** max(threads, 1)
