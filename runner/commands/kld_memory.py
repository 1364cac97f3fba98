"""Does ``kvtop kld``'s pair fit in memory? Both sides are alive at once: the weights (one
file, or both files of a weights comparison), each side's KV cache at ``-c`` and compute
buffer (runner.physics.kv_bytes, runner.physics.compute_buffer: its output buffer holds a
micro-batch's logits, every position asked for), and the copy of each side's rows of
logits kvtop scores. Checked against the memory free where the weights go (the RAM; a GPU's
free memory when layers are offloaded to one), before anything is loaded, so a pair that
cannot fit is one line saying how much it needs, not an allocation failure half-way."""

from __future__ import annotations

from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.compute_buffer import compute_buffer
from kvtop.runner.physics.kv_bytes import kv_layout
from kvtop.runner.settings import Settings
from kvtop.runner.units import GIB


def needed(sides: list[tuple[ModelFacts, Settings]], n_ctx: int, shared_weights: bool) -> tuple[int, str] | None:
    """(bytes, what they are) for every side at once; None when a size is unknown."""
    weights, kv, compute = [], [], []
    for facts, s in sides:
        if facts.weights_bytes is None or not facts.layers:
            return None
        layout = kv_layout(facts, n_ctx, s.cache_type_k, s.cache_type_v, s.swa_full, s.n_ubatch)
        cb = compute_buffer(facts, layout, s.n_ubatch, s.n_ubatch, s.flash_attn)
        logits = min(s.n_ubatch, n_ctx) * (facts.n_vocab or 0) * 4  # a slice's rows, every position asked for
        weights.append(facts.weights_bytes)
        kv.append(layout.bytes_allocated)
        compute.append((cb.total if cb else 0) + 2 * logits)  # llama.cpp's output buffer grows to them; kvtop's copy
    w = weights[0] if shared_weights else sum(weights)
    total = w + sum(kv) + sum(compute)

    def gib(xs: list[int]) -> str:
        return " + ".join(f"{x / GIB:.2f}" for x in xs)

    what = (f"weights {gib([w]) if shared_weights else gib(weights)}, KV {gib(kv)}, "
            f"compute and logits {gib(compute)} GiB")
    return total, what


def fit_problem(base: tuple[ModelFacts, Settings], cand: tuple[ModelFacts, Settings], n_ctx: int,
                free: int | None, where: str = "RAM") -> str | None:
    """One line when the two sides do not fit in ``free`` bytes together, else None."""
    need = needed([base, cand], n_ctx, base[1].model == cand[1].model)
    if need is None or free is None or need[0] <= free:
        return None
    two = "the two models" if base[1].model != cand[1].model else "the base and the candidate"
    return (f"{two} need about {need[0] / GIB:.2f} GiB at once at -c {n_ctx:,} ({need[1]}) and "
            f"{free / GIB:.2f} GiB of {where} is free: give a smaller -c or -ub, or free some memory")


def free_memory(s: Settings) -> tuple[int | None, str]:
    """(free bytes, where) for the weights of ``s``: the first GPU's when layers are offloaded
    to one, else the RAM available."""
    import psutil

    if s.n_gpu_layers != 0:
        from kvtop.runner.system.hardware import query_gpus

        gpus = query_gpus().gpus
        if gpus:
            return gpus[0].memory_free, f"GPU {gpus[0].index} memory"
    return int(psutil.virtual_memory().available), "RAM"
