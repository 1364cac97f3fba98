"""One price for a turn's load, used both ways: to bring a calibration sample taken on a
busy machine to quiet, and to price a quiet forecast at today's load
(runner.calibration.load ``at_load``). Arithmetic only.

The shape is ``runner.system.cpu_pace``'s (threads that meet at a barrier, the cores
others hold; Amdahl's cost of fewer threads). Its strength is this machine's, fitted
from the samples themselves: a price is ``slowdown ** g`` per phase (``g`` = 1 is the
shape as measured on the development machine). Quiet and busy turns of the same model
and settings tell ``g`` apart from the efficiency; turns all at one load cannot, and
then ``g`` keeps its prior, 1 (a ridge toward it: ``PRIOR_WEIGHT``).

Loads under the busy test (``runner.calibration.busy``: a quarter of the CPU) are not
priced, as ``at_load`` never priced them: the forecast and the samples agree on it.

A turn whose load changed within it is priced at its mean, unless the prices of its
readings are more than ``SPREAD_LIMIT`` apart: then no single price fits it, and it is
refused (``spread_reason`` says why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtop.runner.calibration.busy import too_busy
from kvtop.runner.system.cpu_pace import slowdown, thread_scaling

PRIOR_WEIGHT = 3 * math.log(2.0) ** 2  # the prior g = 1 counts as three samples at a 2x price
G_RANGE = (0.25, 2.5)
SPREAD_LIMIT = 2.0  # the readings' prices more than this far apart: no single price fits


@dataclass(frozen=True)
class TurnLoad:
    """What other processes held of the CPU while one turn ran: their mean (cores) over
    the turn and the readings taken through it (cores, one a second)."""

    others_cores: float
    n_cores: int
    readings: tuple[float, ...] = ()

    @property
    def share(self) -> float:
        return min(max(self.others_cores / self.n_cores, 0.0), 1.0) if self.n_cores > 0 else 0.0

    @classmethod
    def of_share(cls, share: float, n_cores: int, readings: tuple[float, ...] = ()) -> TurnLoad:
        return cls(max(share, 0.0) * n_cores, n_cores, tuple(r * n_cores for r in readings))


@dataclass(frozen=True)
class Pace:
    """The fitted strength of the load's price: ``g`` per phase, and the samples at a
    load (a price above 1) each rests on (0: the prior)."""

    g_prefill: float = 1.0
    g_decode: float = 1.0
    n_prefill: int = 0
    n_decode: int = 0


def load_slowdown(others_cores: float, n_cores: int, threads: int, long_ops: bool) -> float:
    """The shape's slowdown at a load (1.0 under the busy test, as ``at_load``)."""
    if n_cores <= 0 or not too_busy(others_cores / n_cores):
        return 1.0
    return slowdown(others_cores, n_cores, threads, long_ops=long_ops)


def price(others_cores: float | None, n_cores: int, threads: int, engine_threads: int, long_ops: bool,
          g: float = 1.0, cpu_fraction: float = 1.0) -> float:
    """How many times longer the CPU's work of a phase takes on ``threads`` threads (0:
    the engine's own) at the load, than quietly on the engine's ``engine_threads``; only
    the CPU's share (``cpu_fraction``) is slowed. ``others_cores`` None: not measured
    (a server elsewhere): 1.0."""
    t = threads or engine_threads or 1
    k = thread_scaling(engine_threads or t, t, long_ops=long_ops) if engine_threads else 1.0
    if others_cores is not None:
        k *= load_slowdown(others_cores, n_cores, t, long_ops) ** g
    f = min(max(cpu_fraction, 0.0), 1.0)
    return (1.0 - f) + f * k


def fit_g(residuals: list[tuple[float, float]]) -> tuple[float, int]:
    """``g`` from [(log price of the shape, log of measured / quiet fit)], ridge toward 1;
    and how many samples at a load it rests on."""
    busy = [(x, y) for x, y in residuals if x > 1e-6 and math.isfinite(y)]
    sxx = sum(x * x for x, _ in busy) + PRIOR_WEIGHT
    sxy = sum(x * y for x, y in busy) + PRIOR_WEIGHT * 1.0
    return min(max(sxy / sxx, G_RANGE[0]), G_RANGE[1]), len(busy)


def spread_reason(load: TurnLoad, threads: int, long_ops: bool = False) -> str | None:
    """Why no single price fits a turn (its readings' prices more than ``SPREAD_LIMIT``
    apart), or None when one does."""
    if len(load.readings) < 2:
        return None
    prices = [load_slowdown(o, load.n_cores, max(threads, 1), long_ops) for o in load.readings]
    if max(prices) / min(prices) <= SPREAD_LIMIT:
        return None
    lo, hi = min(load.readings), max(load.readings)
    n = max(load.n_cores, 1)
    return (f"the load changed while it ran (other processes used {lo / n:.0%} to {hi / n:.0%} of the CPU): "
            f"no single price fits it")
