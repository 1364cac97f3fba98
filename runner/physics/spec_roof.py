"""The speculative roof: what one verify pass of a draft yields on this machine.

A verify pass decodes the sampled token and a draft of ``k`` tokens in one batch, every
position with logits, so it reads the weights (and the KV at the depth) once, and does
``k + 1`` tokens' FLOPs at the pace the CPU probe measured for a batch of ``k + 1``
(``CPUProbe.tflops_at``; a GPU's or a given figure at its peak):

    pass seconds  = max(weights + KV at depth over the bandwidth,
                        (k + 1) x FLOPs per token over the FLOPS at k + 1)
    tokens a pass = 1 + A x k               (A: accepted / drafted, the pane's figure)
    roof          = tokens a pass / pass seconds
    speedup       = roof / the plain ceiling (one token a step, the binding ceiling)
    stops paying  = below A = (pass seconds / plain step - 1) / k

MTP (``draft-mtp``) drafts with the model's own next-token heads: each pass also reads
their bytes once per drafted token (``extra_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.runner.physics.machine import hardware_at_batch
from kvtop.runner.physics.phase_costs import decode_flops

if TYPE_CHECKING:
    from kvtop.runner.events import TurnMetrics
    from kvtop.runner.physics.here import Here

DRAFT_SIZES = (1, 2, 3, 4, 8, 16, 32, 48, 64)


@dataclass(frozen=True)
class SpecRoof:
    draft: float  # k: tokens drafted a pass (a turn's mean)
    acceptance: float  # A: the share of drafted tokens kept
    tokens_per_pass: float
    pass_s: float  # a verify pass of k + 1 tokens
    plain_s: float  # a plain decode step at the same depth
    roof_tok_s: float
    bound: str  # "bandwidth" or "compute": what sets the pass's time

    @property
    def speedup(self) -> float:
        return self.roof_tok_s * self.plain_s

    @property
    def pass_cost(self) -> float:
        """A verify pass over a plain step (1.3: a pass costs 1.3 steps)."""
        return self.pass_s / self.plain_s

    @property
    def break_even(self) -> float | None:
        """The acceptance below which speculating with drafts of ``k`` is slower than
        plain decode; None when no acceptance pays (it would need more than 100%)."""
        a = (self.pass_cost - 1) / self.draft
        return max(a, 0.0) if a <= 1 else None


def _step_s(here: Here, tokens: int, depth: int, extra_bytes: float = 0.0) -> tuple[float, str] | None:
    """(seconds, bound) for one decode batch of ``tokens`` at ``depth``."""
    bw, _ = here.ceilings(depth)
    flops = decode_flops(here.facts)
    if not bw:
        return None
    read_s = 1.0 / bw + (extra_bytes / (here.hw.bandwidth_gbs * 1e9) if here.hw.bandwidth_gbs else 0.0)
    tf = hardware_at_batch(here.hw, tokens).tflops if tokens > 1 else here.hw.tflops
    comp_s = tokens * flops / (tf * 1e12) if flops and tf else 0.0
    return (comp_s, "compute") if comp_s > read_s else (read_s, "bandwidth")


def spec_roof(here: Here, draft: float, acceptance: float, depth: int, extra_bytes: float = 0.0) -> SpecRoof | None:
    """The roof of verify passes of ``draft`` tokens (a turn's mean: the batch is the
    nearest whole size) kept at ``acceptance``, at ``depth``; ``extra_bytes``: what the
    drafter reads a drafted token (MTP heads); None unknown."""
    if draft < 1:
        return None
    plain = _step_s(here, 1, depth)
    passed = _step_s(here, round(draft) + 1, depth, extra_bytes * draft)
    if plain is None or passed is None:
        return None
    per_pass = 1 + min(max(acceptance, 0.0), 1.0) * draft
    return SpecRoof(draft, acceptance, per_pass, passed[0], plain[0], per_pass / passed[0], passed[1])


def roof_table(here: Here, acceptance: float, depth: int, n_max: int, extra_bytes: float = 0.0) -> list[SpecRoof]:
    """The roof at each draft size up to ``n_max`` (and ``n_max`` itself)."""
    sizes = sorted({k for k in DRAFT_SIZES if k <= n_max} | {n_max})
    return [r for k in sizes if (r := spec_roof(here, k, acceptance, depth, extra_bytes)) is not None]


def turn_roof(here: Here | None, m: TurnMetrics, depth: int) -> SpecRoof | None:
    """The roof at a speculative turn's own acceptance and mean draft (None: it verified
    nothing, or no machine model)."""
    if here is None or not m.spec_type or not m.spec_passes or not m.spec_drafted:
        return None
    return spec_roof(here, m.spec_drafted / m.spec_passes, m.spec_accepted / m.spec_drafted, depth)


def spec_roof_phrases(r: SpecRoof | None) -> list[str] | None:
    """The speculative roof beside the plain ceilings: "speculative roof 1,009 tok/s",
    "(3.3x the plain ceiling,", "33.6 tok/pass)"; under the plain ceiling, that speculation
    cannot pay at this acceptance and draft size (the verify pass's modelled cost is
    ``kvtop estimate --spec-type``'s; the decode line's is the measured one)."""
    from kvtop.runner.units import fmt_rate

    if r is None:
        return None
    if r.speedup < 1:
        return [f"roof {fmt_rate(r.roof_tok_s)} at {r.tokens_per_pass:.1f} tok/pass,",
                f"under the plain ceiling {fmt_rate(1 / r.plain_s)}:", "speculation cannot pay here"]
    return [f"speculative roof {fmt_rate(r.roof_tok_s)}", f"({r.speedup:.1f}x the plain ceiling,",
            f"{r.tokens_per_pass:.1f} tok/pass)"]


def spec_roof_short(r: SpecRoof | None) -> str | None:
    """The roof in at most 40 cells: "spec roof 1,009 tok/s (3.3x)", or under the plain
    ceiling "spec roof 299 < plain 326 tok/s"."""
    from kvtop.runner.units import fmt_rate

    if r is None:
        return None
    if r.speedup < 1:
        return f"spec roof {fmt_rate(r.roof_tok_s, '').strip()} < plain {fmt_rate(1 / r.plain_s)}"
    return f"spec roof {fmt_rate(r.roof_tok_s)} ({r.speedup:.1f}x)"
