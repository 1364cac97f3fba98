"""The machine's roofline as the forecast's shape (runner.physics.here ``Here``): prefill
seconds for ``n`` tokens at depth ``d`` (a micro-batch at the FLOPS of its size), and
seconds per decoded token at depth ``d`` under whichever ceiling binds there (each
device's share where the model is split). The shape asks the one machine model, so the
forecast and the panes price a turn the same way."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

from kvtop.runner.calibration.forecast import Basis

if TYPE_CHECKING:
    from kvtop.runner.physics.here import Here
    from kvtop.runner.system.cpu_probe import CPUProbe


def roofline_basis(here: Here) -> Basis:
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
        from kvtop.runner.physics.phase_costs import layer_attention_flops, prefill_flops

        total = prefill_flops(here.facts, n, depth)
        return sum(layer_attention_flops(here.facts, n, depth)) / total if total else 0.0

    s = here.settings
    cpu = here.hw.cpu
    measured = (cpu is not None and cpu.attention_tflops and s.flash_attn != "off"
                and (s.n_gpu_layers == 0 or not here.hw.gpus))  # every layer's attention on this CPU
    return Basis(prefill_s, token_s, min(s.n_ubatch, s.n_batch), attention_share, peak_prefill_s,
                 decode_attention_pace(here, cpu) if measured and cpu is not None else None)


def decode_attention_pace(here: Here, cpu: CPUProbe) -> Callable[[int], float | None]:
    """Seconds of one decoded token's attention at a depth, each layer at the pace the
    CPU probe measured for heads of its size (runner.system.ggml_matmul.probe_attention)."""
    from kvtop.runner.physics.phase_costs import layer_attention_flops

    @lru_cache(maxsize=4096)
    def decode_attention_s(depth: int) -> float | None:
        total = 0.0
        for layer, flops in zip(here.facts.layers, layer_attention_flops(here.facts, 1, depth)):
            tf = cpu.attention_tflops_at(layer.head_dim_k or 0) if flops else None
            total += flops / (tf * 1e12) if tf else 0.0
        return total

    return decode_attention_s
