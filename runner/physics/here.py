"""One machine model: this model (its GGUF facts), its KV cache as llama.cpp allocates
it, this machine (the hardware profile) and llama.cpp's settings, as one frozen value.

Everything the screen draws against is computed here, once, the same way for every
pane (nvitop's rule: the api computes, the tui draws): the decode ceilings at a depth,
a turn's prefill and decode at the roofline, the Estimate pane's rows, the memory
check, a turn that beat its ceilings, and the batched physics of a server's slots.
Before ``Here``, tui/ held the figures as four loose values and passed them as four
arguments to each of these, and computed the KV layout in three places.

``Here`` is a value: a new n_ctx (the loaded engine's) or a re-probed CPU is a new
``Here`` (``resized``, ``with_hardware``); whoever holds one hands it on, never the
object that made it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from kvtop.runner.physics.batching import (
    BatchCeiling,
    SpecBatchCeiling,
    batched_decode_ceiling,
    compute_tok_s,
    more_conversations_fit,
    speculative_batched_ceiling,
)
from kvtop.runner.physics.kv_bytes import KVLayout, kv_bytes_read_at_depth, kv_layout
from kvtop.runner.physics.machine import ceilings_here, predict_here, prefill_seconds_here
from kvtop.runner.physics.placement import effective_gpu_layers
from kvtop.runner.physics.roofline import Prediction
from kvtop.runner.units import fmt_rate

if TYPE_CHECKING:
    from kvtop.runner.events import Loaded, TurnMetrics
    from kvtop.runner.llama_buffers import LlamaBuffers
    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.physics.estimate_rows import EstimateRows
    from kvtop.runner.physics.memory_check import MemoryCheck
    from kvtop.runner.policy.tune_evidence import TuneEvidence
    from kvtop.runner.settings import Settings
    from kvtop.runner.system.hardware import HardwareProfile

BEATEN = 1.02  # a measured rate this far above its ceiling means the ceiling is wrong


class Slot(Protocol):
    """What the batched physics reads of a server's slot (runner.server.monitor's)."""

    @property
    def is_processing(self) -> bool: ...
    @property
    def n_prompt_tokens(self) -> int: ...
    @property
    def n_ctx(self) -> int: ...


@dataclass(frozen=True)
class CacheShown:
    """What the KV pane says of the cache beside ``Here.layout`` (everything allocated)."""

    n_ctx: int  # the chat's own context (a server slot's)
    allocated_bytes: float | None = None  # what llama.cpp said it allocated (None: not in kvtop's log)
    slots: int = 1  # a server's slots, each with its own n_ctx


def layout_for(facts: ModelFacts, settings: Settings, n_ctx: int, n_ubatch: int | None = None) -> KVLayout:
    """The KV cache llama.cpp allocates for ``n_ctx`` cells with these settings'
    cache types and SWA choice (``n_ubatch``: the loaded engine's, else the settings')."""
    return kv_layout(facts, n_ctx, settings.cache_type_k, settings.cache_type_v, settings.swa_full,
                     settings.n_ubatch if n_ubatch is None else n_ubatch)


@dataclass(frozen=True)
class Here:
    """This model on this machine with these settings (see the module's docstring)."""

    facts: ModelFacts
    layout: KVLayout
    hw: HardwareProfile
    settings: Settings

    @classmethod
    def at(cls, facts: ModelFacts, hw: HardwareProfile, settings: Settings, n_ctx: int | None = None,
           n_ubatch: int | None = None) -> Here:
        """With the KV cache of ``n_ctx`` cells (default: the settings')."""
        return cls(facts, layout_for(facts, settings, settings.n_ctx if n_ctx is None else n_ctx, n_ubatch),
                   hw, settings)

    @classmethod
    def known(cls, facts: ModelFacts | None, layout: KVLayout | None, hw: HardwareProfile | None,
              settings: Settings) -> Here | None:
        """The model on this machine, or None while any of it is not known (a server
        without its GGUF header: no facts, no KV layout, no physics)."""
        if facts is None or layout is None or hw is None:
            return None
        return cls(facts, layout, hw, settings)

    def resized(self, n_ctx: int, n_ubatch: int | None = None) -> Here:
        """The same machine with the KV cache the engine allocated (a server: every slot's)."""
        return replace(self, layout=layout_for(self.facts, self.settings, n_ctx, n_ubatch))

    def fitted(self, loaded: Loaded, llama_buffers: bool) -> tuple[Here, CacheShown]:
        """The machine with the cache the engine that reported ``loaded`` (``runner.events.Loaded``)
        allocated: kvtop's own (``llama_buffers``: llama.cpp's allocation is in kvtop's
        log) at its n_ctx and micro-batch; a server's, every slot's ``n_ctx``."""
        if llama_buffers:
            return (self.resized(loaded.n_ctx, loaded.n_ubatch),
                    CacheShown(loaded.n_ctx, loaded.buffers.kv_mib * 2**20))
        slots = max(loaded.total_slots or 1, 1)
        return self.resized(loaded.n_ctx * slots), CacheShown(loaded.n_ctx, None, slots)

    def with_hardware(self, hw: HardwareProfile) -> Here:
        """The same model and cache on a re-probed machine."""
        return replace(self, hw=hw)

    # ------------------------------------------------------------ one user
    def ceilings(self, depth: int) -> tuple[float | None, float | None]:
        """(bandwidth ceiling, compute ceiling) in tok/s for a token decoded at ``depth``
        (each device's share where the model is split)."""
        return ceilings_here(self.facts, self.layout, self.hw, self.settings, depth)

    def predict(self, prompt_tokens: int, output_tokens: int = 1, reused_tokens: int = 0) -> Prediction:
        """A turn of ``prompt_tokens`` computed after ``reused_tokens`` cached, then
        ``output_tokens`` decoded (runner.physics.machine.predict_here)."""
        return predict_here(self.facts, self.layout, self.hw, self.settings, prompt_tokens, output_tokens,
                            reused_tokens)

    def prefill_seconds(self, tokens: int, depth: int, *, at_peak: bool = False) -> float | None:
        """Seconds to compute ``tokens`` prompt tokens after ``depth`` cached, at the roofline
        (the TTFT waterfall's prefill bar)."""
        return prefill_seconds_here(self.facts, self.layout, self.hw, self.settings, tokens, depth,
                                    at_peak=at_peak)

    def estimate_rows(self, *, buffers: LlamaBuffers | None = None, peak_rss: int | None = None,
                      turn: TurnMetrics | None = None, turn_ran: bool = False,
                      others_cpu: float | None = None, tuned: TuneEvidence | None = None) -> EstimateRows:
        """The Estimate pane's rows (runner.physics.estimate_rows.estimate_rows)."""
        from kvtop.runner.physics.estimate_rows import estimate_rows

        return estimate_rows(self.facts, self.layout, self.hw, self.settings, buffers=buffers, peak_rss=peak_rss,
                             turn=turn, turn_ran=turn_ran, others_cpu=others_cpu, tuned=tuned)

    def memory_check(self) -> MemoryCheck:
        """The pre-flight memory check at these settings (runner.physics.memory_check)."""
        from kvtop.runner.physics.memory_check import memory_check
        from kvtop.runner.physics.offload import OffloadSettings

        return memory_check(self.facts, self.layout, self.hw, self.settings.n_gpu_layers,
                            offload=OffloadSettings.from_settings(self.settings))

    def beaten_by(self, mt: TurnMetrics) -> list[str]:
        """What a finished turn (runner.events.TurnMetrics) ran faster than its roofline,
        said as a reason to probe the CPU again: decode against its binding ceiling in the
        middle of the reply, prefill (64 tokens or more) against its roofline."""
        beaten: list[str] = []
        depth = mt.prompt_tokens + mt.decode_tokens // 2
        bw, comp = self.ceilings(depth)
        roof = min(r for r in (bw, comp) if r) if (bw or comp) else None
        if roof and mt.spec_passes and mt.spec_drafted:  # several tokens a pass: the speculative roof
            from kvtop.runner.physics.spec_roof import spec_roof

            spec = spec_roof(self, mt.spec_drafted / mt.spec_passes, mt.spec_accepted / mt.spec_drafted, depth)
            roof = max(roof, spec.roof_tok_s) if spec else roof
        if mt.spec_accepted and not mt.spec_passes:  # a server's turn speculated: its passes are not known
            roof = None
        if roof and mt.decode_tok_s and mt.decode_tok_s > roof * BEATEN:
            beaten.append(f"decode {fmt_rate(mt.decode_tok_s)} beat its {fmt_rate(roof)} ceiling")
        pre = self.predict(max(mt.prefill_tokens, 1), 1, mt.reused_tokens).prefill_tok_s
        if pre and mt.prefill_tok_s and mt.prefill_tok_s > pre * BEATEN and mt.prefill_tokens >= 64:
            beaten.append(f"prefill {fmt_rate(mt.prefill_tok_s)} beat its {fmt_rate(pre)} roofline")
        return beaten

    # ------------------------------------------------------------ a server's slots
    def batched_ceiling(self, slots: Iterable[Slot]) -> BatchCeiling | None:
        """The batched decode ceiling of the slots decoding now (at least one slot at depth
        0 when none is), or None without a bandwidth or the active weights' size."""
        f, hw = self.facts, self.hw
        if not hw.bandwidth_gbs or f.weights_bytes_active is None:
            return None
        decoding = [sl for sl in slots if sl.is_processing]
        kv = [float(kv_bytes_read_at_depth(self.layout, sl.n_prompt_tokens)) for sl in decoding] or [
            float(kv_bytes_read_at_depth(self.layout, 0))]
        return batched_decode_ceiling(hw.bandwidth_gbs * 1e9, f.weights_bytes_active, kv,
                                      compute_tok_s(f, hw.tflops))


def speculative_server_ceiling(here: Here | None, plain: BatchCeiling | None, drafted: int, drafts: int,
                               accepted: int) -> SpecBatchCeiling | None:
    """The batched ceiling with speculation, from a server's counters (drafted and
    accepted tokens over ``drafts`` verify passes): None without a plain ceiling or a pass."""
    from kvtop.runner.physics.machine import hardware_at_batch
    from kvtop.runner.physics.phase_costs import decode_flops

    if here is None or plain is None or drafts <= 0 or drafted <= 0 or not here.hw.bandwidth_gbs:
        return None
    return speculative_batched_ceiling(plain, here.hw.bandwidth_gbs * 1e9, decode_flops(here.facts),
                                       lambda n: hardware_at_batch(here.hw, n).tflops, drafted / drafts,
                                       1 + accepted / drafts)


def server_physics(here: Here | None, slots: Sequence[Slot]) -> tuple[BatchCeiling | None, int | None, float | None]:
    """A server's slots (runner.server.monitor): (the batched ceiling of the slots decoding
    now, how many more conversations fit, their average length). Without a ``Here`` (no
    GGUF header, no hardware) only the last two, which need no physics."""
    if not slots:
        return None, None, None
    used = [sl.n_prompt_tokens for sl in slots if sl.n_prompt_tokens > 0]
    avg = sum(used) / len(used) if used else None
    cells_total = sum(sl.n_ctx for sl in slots)
    fit = more_conversations_fit(cells_total, sum(used), avg) if avg else None
    return (here.batched_ceiling(slots) if here is not None else None), fit, avg


def cpu_share(facts: ModelFacts | None, hw: HardwareProfile | None, n_gpu_layers: int) -> float:
    """The share of the model's layers the CPU computes with ``n_gpu_layers`` offloaded
    (1.0 without a GPU or without the facts: all of it, as far as anyone can tell)."""
    n_layer = (facts.n_layers if facts is not None else None) or 0
    on_gpu = min(effective_gpu_layers(n_gpu_layers, n_layer), n_layer) if hw is not None and hw.gpus else 0
    return 1.0 - on_gpu / n_layer if n_layer else 1.0
