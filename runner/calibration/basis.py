"""The machine's roofline as the forecast's shape (runner.physics.machine): prefill
seconds for ``n`` tokens at depth ``d`` (a micro-batch at the FLOPS of its size), and
seconds per decoded token at depth ``d`` under whichever ceiling binds there (each
device's share where the model is split)."""

from __future__ import annotations

from functools import lru_cache

from runner.calibration.forecast import Basis


def roofline_basis(facts, layout, hw, settings) -> Basis:
    from runner.physics.machine import ceilings_here, prefill_seconds_here

    @lru_cache(maxsize=4096)
    def prefill_s(n: int, depth: int) -> float | None:
        return prefill_seconds_here(facts, layout, hw, settings, n, depth)

    @lru_cache(maxsize=4096)
    def peak_prefill_s(n: int, depth: int) -> float | None:
        return prefill_seconds_here(facts, layout, hw, settings, n, depth, at_peak=True)

    @lru_cache(maxsize=4096)
    def token_s(depth: int) -> float | None:
        rates = [r for r in ceilings_here(facts, layout, hw, settings, depth) if r]
        return 1.0 / min(rates) if rates else None

    @lru_cache(maxsize=4096)
    def attention_share(n: int, depth: int) -> float:
        from runner.physics.phase_costs import layer_attention_flops, prefill_flops

        total = prefill_flops(facts, n, depth)
        return sum(layer_attention_flops(facts, n, depth)) / total if total else 0.0

    return Basis(prefill_s, token_s, min(settings.n_ubatch, settings.n_batch), attention_share, peak_prefill_s)
