"""Estimate vs actual, as data: what the physics predicts beside what was measured.

``estimate_rows`` is pure: the app passes what it knows (model facts, KV layout,
hardware, settings, llama.cpp's buffers, the engine's peak RSS, the last turn's
metrics) and gets one frozen ``EstimateRows`` for the Estimate pane and its verdict
(``runner.physics.verdicts.estimate_verdict``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, TypeGuard

from kvtop.runner.physics.machine import predict_here
from kvtop.runner.policy.tune_evidence import TuneEvidence
from kvtop.runner.settings import usable_cores
from kvtop.runner.units import MIB

if TYPE_CHECKING:
    from kvtop.runner.events import TurnMetrics
    from kvtop.runner.llama_buffers import LlamaBuffers
    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.physics.kv_bytes import KVLayout
    from kvtop.runner.settings import Settings
    from kvtop.runner.system.hardware import HardwareProfile

FULL_PRECISION_KV = ("f16", "f32", "bf16")


def _usable(x: float | None) -> TypeGuard[float]:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@dataclass(frozen=True)
class Row:
    """One predicted/measured pair; None is "cannot be known"."""

    predicted: float | None = None
    measured: float | None = None

    @property
    def ratio(self) -> float | None:
        """measured / predicted, when both are known and positive."""
        if _usable(self.predicted) and _usable(self.measured):
            return self.measured / self.predicted
        return None


@dataclass(frozen=True)
class TurnFigures:
    """What the verdict needs of the measured turn (from ``runner.events.TurnMetrics``).

    None marks a figure not known (e.g. rows built from the older dict form)."""

    prefill_tokens: int | None = None  # computed (not reused) prompt tokens
    prefill_s: float | None = None
    wait_s: float | None = None  # submit -> the engine started the turn (model load, a previous turn)
    ttft_s: float | None = None
    decode_tokens: int | None = None
    decode_s: float | None = None  # first token -> last token
    decode_tok_s: float | None = None  # mean: intervals / decode_s
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    spec_tokens_per_pass: float | None = None  # a speculative turn's tokens a verify pass (None: plain decode)

    @classmethod
    def from_metrics(cls, mt: TurnMetrics) -> TurnFigures:
        per_pass = (mt.spec_accepted + mt.spec_passes) / mt.spec_passes if mt.spec_passes and mt.spec_accepted else None
        return cls(prefill_tokens=mt.prefill_tokens, prefill_s=mt.prefill_s, wait_s=mt.wait_s, ttft_s=mt.ttft_s,
                   decode_tokens=mt.decode_tokens, decode_s=mt.decode_s, decode_tok_s=mt.decode_tok_s,
                   itl_p50_ms=mt.itl_p50_ms, itl_p95_ms=mt.itl_p95_ms, spec_tokens_per_pass=per_pass)


@dataclass(frozen=True)
class EstimateContext:
    """The settings and machine facts a verdict's reasons depend on."""

    gpu_present: bool = False
    n_gpu_layers: int = 0
    n_ubatch: int = 512
    kv_types: str = "f16/f16"
    kv_quantised: bool = False
    weights_bytes: int | None = None
    others_cpu: float | None = None  # other processes' share of the machine's CPU during the turn (0..1)
    threads: int = 0  # the decode threads the turn ran on (0: not known)
    n_cores: int = 0  # the cores the engine may use (0: not known)
    engine_threads: int = 0  # the engine's decode threads when the turn ran on fewer (the free cores); else 0
    tuned: TuneEvidence | None = None  # what ``kvtop tune`` measured for these settings here (the advice's evidence)

    @property
    def on_cpu(self) -> bool:
        return not (self.gpu_present and self.n_gpu_layers)

    @property
    def gpu_idle(self) -> bool:
        """A GPU is there and no layer runs on it."""
        return self.gpu_present and self.n_gpu_layers == 0


@dataclass(frozen=True)
class EstimateRows:
    """The Estimate pane's rows: TTFT (seconds), prefill and decode (tok/s), KV bytes,
    weight bytes and peak memory (bytes)."""

    ttft: Row = field(default_factory=Row)
    prefill: Row = field(default_factory=Row)
    decode: Row = field(default_factory=Row)
    kv: Row = field(default_factory=Row)
    weights: Row = field(default_factory=Row)
    peak: Row = field(default_factory=Row)
    context: EstimateContext = field(default_factory=EstimateContext)
    turn: TurnFigures | None = None
    note: str = ""

    KEYS = ("ttft", "prefill", "decode", "kv", "weights", "peak")

    def row(self, key: str) -> Row:
        row: Row = getattr(self, key)
        return row


class _TurnRows(TypedDict, total=False):
    """The rows a measured turn fills in."""

    ttft: Row
    prefill: Row
    decode: Row
    turn: TurnFigures


def hardware_note(hw: HardwareProfile) -> str:
    """"hardware: 21.4 GB/s, 1.23 TFLOPS · CPU probe (2 threads, …)": the figures the
    roofline uses first, where they stay in the short form a narrow pane takes (it drops
    the asides: at 160x48 after a turn the line read "hardware: CPU probe", no figure)."""
    figures = [f"{hw.bandwidth_gbs:.1f} GB/s" if hw.bandwidth_gbs else "", f"{hw.tflops:.3g} TFLOPS" if hw.tflops else ""]
    said = ", ".join(f for f in figures if f)
    return f"hardware: {said} · {hw.source}" if said else f"hardware: {hw.source}"


def estimate_rows(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, settings: Settings, *,
                  buffers: LlamaBuffers | None = None, peak_rss: int | None = None,
                  turn: TurnMetrics | None = None, turn_ran: bool = False,
                  others_cpu: float | None = None, tuned: TuneEvidence | None = None) -> EstimateRows:
    """The Estimate pane's rows.

    ``facts`` (runner.model.facts.ModelFacts), ``layout`` (runner.physics.kv_bytes.KVLayout),
    ``hw`` (runner.system.hardware.HardwareProfile), ``settings`` (runner.settings.Settings);
    ``buffers``: llama.cpp's (runner.llama_buffers.LlamaBuffers) once loaded;
    ``peak_rss``: the engine's peak RSS so far; ``turn``: the turn just finished
    (runner.events.TurnMetrics), None at load; ``turn_ran``: some earlier turn ran;
    ``others_cpu``: other processes' share of the CPU during that turn (0..1);
    ``tuned``: ``kvtop tune``'s cached result for these settings (runner.policy.tune_evidence).

    The measured peak is compared only once a turn ran: at load, llama.cpp's mmap-ed
    weights are not paged in yet and the engine's RSS is a fraction of what a turn needs.
    """
    f, lay = facts, layout
    kv_meas = buffers.kv_mib * MIB if buffers else None
    weights_meas = buffers.weights_mib * MIB if buffers else None
    peak_pred = None
    if f.weights_bytes is not None:
        peak_pred = f.weights_bytes + lay.bytes_allocated + (buffers.compute_total_mib * MIB if buffers else 0)
    ran = turn is not None or turn_ran
    engine_threads = settings.resolved().n_threads
    turn_threads = getattr(turn, "n_threads", 0) or 0  # 0: not recorded (a server's turn, an older trace)
    context = EstimateContext(
        gpu_present=bool(hw.gpus), n_gpu_layers=settings.n_gpu_layers, n_ubatch=settings.n_ubatch,
        kv_types=f"{settings.cache_type_k}/{settings.cache_type_v}",
        kv_quantised=(settings.cache_type_k not in FULL_PRECISION_KV
                      or settings.cache_type_v not in FULL_PRECISION_KV),
        weights_bytes=f.weights_bytes, others_cpu=others_cpu,
        threads=turn_threads or engine_threads,
        engine_threads=engine_threads if 0 < turn_threads < engine_threads else 0,
        # the probe's threads are the machine's cores, and the trace records them: a replay says what was said live
        n_cores=hw.cpu.threads if hw.cpu is not None else usable_cores(), tuned=tuned,
    )
    kw: _TurnRows = {}
    if turn is not None:
        p = predict_here(f, lay, hw, settings, max(turn.prefill_tokens, 1), turn.decode_tokens,
                         turn.reused_tokens)
        ttft_pred = p.prefill_s + turn.template_s + turn.tokenize_s if p.prefill_s is not None else None
        kw = _TurnRows(ttft=Row(ttft_pred, turn.ttft_s), prefill=Row(p.prefill_tok_s, turn.prefill_tok_s),
                       decode=Row(p.decode_tok_s, turn.decode_tok_s), turn=TurnFigures.from_metrics(turn))
    return EstimateRows(
        kv=Row(lay.bytes_allocated, kv_meas),
        weights=Row(f.weights_bytes, weights_meas),
        peak=Row(peak_pred, peak_rss if ran else None),
        context=context,
        note=hardware_note(hw),
        **kw,
    )
