"""The machine's roofline as the forecast's shape (runner.physics.here ``Here``): prefill
seconds for ``n`` tokens at depth ``d`` (a micro-batch at the FLOPS of its size), and
seconds per decoded token at depth ``d`` under whichever ceiling binds there (each
device's share where the model is split). The shape asks the one machine model, so the
forecast and the panes price a turn the same way."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from runner.calibration.forecast import Basis

if TYPE_CHECKING:
    from runner.physics.here import Here


def roofline_basis(here: "Here") -> Basis:
    """The forecast's shape on ``here``: the model's facts, its KV cache, the hardware,
    and the settings whose micro-batch (``-ub`` within ``-b``) the forecast steps by."""

    @lru_cache(maxsize=4096)
    def prefill_s(n: int, depth: int) -> float | None:
        return here.prefill_seconds(n, depth)

    @lru_cache(maxsize=4096)
    def peak_prefill_s(n: int, depth: int) -> float | None:
        return here.prefill_seconds(n, depth, at_peak=True)

    @lru_cache(maxsize=4096)
    def token_s(depth: int) -> float | None:
        rates = [r for r in here.ceilings(depth) if r]
        return 1.0 / min(rates) if rates else None

    @lru_cache(maxsize=4096)
    def attention_share(n: int, depth: int) -> float:
        from runner.physics.phase_costs import layer_attention_flops, prefill_flops

        total = prefill_flops(here.facts, n, depth)
        return sum(layer_attention_flops(here.facts, n, depth)) / total if total else 0.0

    s = here.settings
    return Basis(prefill_s, token_s, min(s.n_ubatch, s.n_batch), attention_share, peak_prefill_s)
