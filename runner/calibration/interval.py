"""An 80% interval for every forecast, from the calibration's own residuals.

Each turn forecast from a calibration keeps how far off its frozen forecast was (log of
measured / forecast, TTFT and decode time per token) and the price of the load that
forecast was made at (log of at-load / quiet TTFT; 0 on a quiet machine). A forecast's
interval rests on the residuals made at a comparable load (within ``COMPARABLE`` in log
price: a quiet turn's misses say little about a busy one's), pooled with a prior spread
(``PRIOR_SD`` counted as ``PRIOR_N`` residuals) so that with few turns it is wide, and
widened by Student's t for how few they are. Its centre moves with their mean (shrunk
toward the forecast by the prior): a calibration that is short at a load says so.

Their spread is the smaller of their standard deviation and the normal's equivalent of
their median absolute deviation (1.4826 MAD): the misses are heavy-tailed (one early
forecast of 2,560 tokens off by 2.7x, most of the rest within 10-15%), and one outlier's
square held a whole regime's intervals so wide that 97% of the turns fell inside them
(Gemma-3 with both cores held). The tail still counts: a calibration whose misses are all
large keeps its standard deviation.

Before any calibration the forecast is the roofline, a ceiling: the interval runs from
it to ``ROOFLINE_SPAN`` times it (a new user on a busy 2-core machine measured 13-15x).

Arithmetic only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.runner.calibration.forecast import Forecast
    from kvtop.runner.calibration.store import Residual
    from kvtop.runner.events import TurnMetrics

COVERAGE = 0.8
Z = 1.2816  # the normal's 90th percentile: 80% between the 10th and the 90th
COMPARABLE = 0.4  # log price: loads whose price is within 1.5x of each other
PRIOR_SD = 0.2  # log: +-20% per sigma before the calibration's own residuals say otherwise
PRIOR_N = 2
ROOFLINE_SPAN = 20.0


@dataclass(frozen=True)
class Interval:
    """``low``..``high`` as factors on a forecast's time, from ``n`` residuals."""

    low: float
    high: float
    n: int


def t90(dof: float) -> float:
    """Student's t 90th percentile (Cornish-Fisher to 1/dof^2: 1.85 at 2 dof against 1.89)."""
    z = Z
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def load_price(fc: Forecast) -> float:
    """Log of the load's price in ``fc`` (0: a quiet machine's forecast)."""
    if fc.quiet_ttft_s and fc.ttft_s and fc.others_cpu is not None:
        return math.log(max(fc.ttft_s / fc.quiet_ttft_s, 1e-9))
    return 0.0


def median_abs_dev(values: list[float], centre: float) -> float:
    """The median of ``|v - centre|``."""
    dev = sorted(abs(v - centre) for v in values)
    mid = len(dev) // 2
    return dev[mid] if len(dev) % 2 else (dev[mid - 1] + dev[mid]) / 2


def interval(residuals: list[float], prior_sd: float = PRIOR_SD) -> Interval:
    """The 80% factors from log residuals (empty: the prior alone)."""
    m = len(residuals)
    mean = sum(residuals) / m if m else 0.0
    ss = sum((r - mean) ** 2 for r in residuals)
    if m >= 3:
        ss = min(ss, m * (1.4826 * median_abs_dev(residuals, mean)) ** 2)
    dof = max(m - 1, 0) + PRIOR_N
    sd = math.sqrt((ss + PRIOR_N * prior_sd**2) / dof)
    centre = mean * m / (m + PRIOR_N)
    half = t90(dof) * sd * math.sqrt(1 + 1 / (m + 1))
    return Interval(math.exp(centre - half), math.exp(centre + half), m)


def comparable(residuals: list[Residual], price: float, which: int) -> list[float]:
    """The residuals of kind ``which`` (0: TTFT, 1: decode) made at a load like ``price``."""
    out = []
    for r in residuals:
        value = r[which]
        if value is not None and abs(r[2] - price) <= COMPARABLE:
            out.append(value)
    return out


def with_interval(fc: Forecast, residuals: list[Residual], bounded_probe: bool = False) -> Forecast:
    """``fc`` with its 80% interval for TTFT and decode tok/s. ``bounded_probe``: the
    roofline rests on a probe taken under load (lower bounds of the ceilings), so it is
    no bound on the time either way: the span goes both ways."""
    if fc.basis != "calibrated":
        below = ROOFLINE_SPAN if bounded_probe else 1.0
        return replace(fc, ttft_s_low=fc.ttft_s / below if fc.ttft_s else None,
                       ttft_s_high=fc.ttft_s * ROOFLINE_SPAN if fc.ttft_s else None,
                       decode_tok_s_low=fc.decode_tok_s / ROOFLINE_SPAN if fc.decode_tok_s else None,
                       decode_tok_s_high=fc.decode_tok_s * below if fc.decode_tok_s else None, interval_n=0)
    price = load_price(fc)
    tt = interval(comparable(residuals, price, 0))
    dd = interval(comparable(residuals, price, 1))
    return replace(fc, ttft_s_low=fc.ttft_s * tt.low if fc.ttft_s else None,
                   ttft_s_high=fc.ttft_s * tt.high if fc.ttft_s else None,
                   decode_tok_s_low=fc.decode_tok_s / dd.high if fc.decode_tok_s else None,
                   decode_tok_s_high=fc.decode_tok_s / dd.low if fc.decode_tok_s else None,
                   interval_n=min(tt.n, dd.n) if dd.n else tt.n)


def measured_ttft(m: TurnMetrics) -> float | None:
    """The turn's TTFT as a forecast means it: from the engine's start (the wait before it left out)."""
    return m.ttft_s - max(m.wait_s, 0.0) if m.ttft_s is not None and m.ttft_s > m.wait_s else None


def residual_of(fc: Forecast | None, m: TurnMetrics) -> Residual | None:
    """How far a calibrated forecast ``fc`` (the one frozen at Enter) was off turn ``m``."""
    if fc is None or fc.basis != "calibrated":
        return None
    ttft = measured_ttft(m)
    r_t = math.log(ttft / fc.ttft_s) if ttft and fc.ttft_s else None
    r_d = math.log(fc.decode_tok_s / m.decode_tok_s) if fc.decode_tok_s and m.decode_tok_s and \
        m.decode_tokens >= 4 else None
    if r_t is None and r_d is None:
        return None
    return (r_t, r_d, load_price(fc))


def inside(fc: Forecast, m: TurnMetrics) -> tuple[bool | None, bool | None]:
    """Whether turn ``m``'s TTFT and decode rate fell inside ``fc``'s interval (None: not measured)."""
    ttft = measured_ttft(m)
    t_in = (fc.ttft_s_low <= ttft <= fc.ttft_s_high) if ttft and fc.ttft_s_low and fc.ttft_s_high else None
    tg = m.decode_tok_s if m.decode_tokens >= 4 else None
    d_in = (fc.decode_tok_s_low <= tg <= fc.decode_tok_s_high) if tg and fc.decode_tok_s_low and \
        fc.decode_tok_s_high else None
    return t_in, d_in


def range_verdict(fc: Forecast, ttft_s: float | None, decode_tok_s: float | None) -> str:
    """"TTFT 2.90 s, outside the forecast 1.10 s–1.60 s" (and decode's when it missed too);
    ``""`` without an interval or a measurement."""
    from kvtop.runner.units import fmt_rate, fmt_seconds

    parts = []
    if ttft_s and fc.ttft_s_low is not None and fc.ttft_s_high is not None:
        where = "inside" if fc.ttft_s_low <= ttft_s <= fc.ttft_s_high else "outside"
        parts.append(f"TTFT {fmt_seconds(ttft_s)}, {where} the forecast "
                     f"{fmt_seconds(fc.ttft_s_low)}–{fmt_seconds(fc.ttft_s_high)}")
    if decode_tok_s and fc.decode_tok_s_low is not None and fc.decode_tok_s_high is not None:
        where = "inside" if fc.decode_tok_s_low <= decode_tok_s <= fc.decode_tok_s_high else "outside"
        parts.append(f"decode {fmt_rate(decode_tok_s)}, {where} "
                     f"{fmt_rate(fc.decode_tok_s_low)}–{fmt_rate(fc.decode_tok_s_high)}")
    return "; ".join(parts)
