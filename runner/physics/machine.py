"""The roofline of this machine with these settings: one prediction for every caller.

With every layer on one device, ``predict`` on that device's figures; with the model
split (``-ngl`` below the layer count, ``-ts`` across GPUs), each device's share of the
bytes and FLOPs at its own bandwidth and FLOPS (runner.physics.offload). The Estimate
pane, the decode pane's ceiling lines, the TTFT waterfall and the forecast's shape all
ask here, so partial offload is priced the same way everywhere.

Prefill is priced micro-batch by micro-batch, as llama.cpp computes it, each on the CPU
at the FLOPS the fastest of llama.cpp's kernels reached at that many tokens in the CPU
probe (``CPUProbe.tflops_at``): a 20-token micro-batch runs the kernels at a fraction
of the pace of a 512-token one, and the output projection (the last token's logits
only) at the pace of one token. Decode and its ceilings keep the peak.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvtop.runner.physics.offload import OffloadSettings, plan
from kvtop.runner.physics.phase_costs import has_split, output_flops
from kvtop.runner.physics.roofline import Prediction, predict, predict_split
from kvtop.runner.system.cpu_probe import batch_factor

if TYPE_CHECKING:
    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.physics.kv_bytes import KVLayout
    from kvtop.runner.settings import Settings
    from kvtop.runner.system.hardware import HardwareProfile


def _predict_flat(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, settings: Settings, prompt_tokens: int,
                  output_tokens: int, reused_tokens: int) -> Prediction:
    """The prediction with every FLOP at the devices' peak."""
    depth = reused_tokens + prompt_tokens + output_tokens // 2
    split = plan(facts, layout, hw, OffloadSettings.from_settings(settings), depth=depth,
                 prompt_tokens=prompt_tokens, reused_tokens=reused_tokens)
    if split.shares:
        return predict_split(facts, layout, list(split.shares), prompt_tokens, output_tokens, reused_tokens)
    return predict(facts, layout, hw.bandwidth_gbs, hw.tflops, prompt_tokens=prompt_tokens,
                   output_tokens=output_tokens, reused_tokens=reused_tokens)


def hardware_at_batch(hw: HardwareProfile, n: int) -> HardwareProfile:
    """``hw`` with the CPU's FLOPS those of a micro-batch of ``n`` tokens: the probe's
    figure scaled by its batch curve. A figure given on the command line (or a GPU's)
    is kept as it is."""
    cpu = getattr(hw, "cpu", None)
    if cpu is None or not cpu.batch_tflops:
        return hw
    tf = cpu.tflops_at(n)
    probed = hw.cpu_tflops is not None and hw.cpu_tflops == cpu.tflops
    single = hw.cpu_source is not None and hw.source == hw.cpu_source and hw.tflops == cpu.tflops  # the CPU's
    if not (probed or single):
        return hw
    return replace(hw, cpu_tflops=tf if probed else hw.cpu_tflops, tflops=tf if single else hw.tflops)


def _micro_batches(settings: Settings, tokens: int, depth: int) -> list[tuple[int, int]]:
    """(tokens, depth it starts at) of each micro-batch llama.cpp splits a prompt into."""
    ub = max(min(settings.n_ubatch, settings.n_batch), 1)
    return [(min(ub, depth + tokens - start), start) for start in range(depth, depth + tokens, ub)]


def _all_on_the_probed_cpu(facts: ModelFacts, hw: HardwareProfile, settings: Settings) -> bool:
    """Every FLOP on the CPU, at the probe's own figure, with the output projection
    counted apart (runner.physics.phase_costs)."""
    cpu = hw.cpu
    return (cpu is not None and has_split(facts) and hw.cpu_tflops is not None and hw.cpu_tflops == cpu.tflops
            and (settings.n_gpu_layers == 0 or not (hw.gpus or hw.gpu_given)))


def _prefill_on_cpu(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, settings: Settings,
                    parts: list[tuple[int, int]]) -> float | None:
    """Each micro-batch's matrices and attention at the pace of its size; the output
    projection, run for the last token only, at the pace of one token."""
    cpu, cpu_tflops = hw.cpu, hw.cpu_tflops
    if cpu is None or cpu_tflops is None:  # not all on the probed CPU (the caller asked)
        return None
    out_s = output_flops(facts, 1) / (cpu_tflops * 1e12)
    total = out_s / batch_factor(cpu.batch_tflops, 1)
    for n, start in parts:
        peak = _predict_flat(facts, layout, hw, settings, n, 1, start).prefill_s
        if peak is None:
            return None
        total += (peak - out_s) / batch_factor(cpu.batch_tflops, n)
    return total


def _prefill_at_batches(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, settings: Settings, tokens: int,
                        depth: int, whole_s: float | None) -> float | None:
    """Seconds to compute ``tokens`` after ``depth``, each micro-batch at its own FLOPS.
    ``whole_s`` (the whole prompt at the peak) keeps the FLOPs exact: the output
    projection runs once, for the last token, not once per micro-batch."""
    if whole_s is None or tokens <= 0:
        return whole_s
    parts = _micro_batches(settings, tokens, depth)
    if _all_on_the_probed_cpu(facts, hw, settings):
        return _prefill_on_cpu(facts, layout, hw, settings, parts)
    if len(parts) == 1:
        return _predict_flat(facts, layout, hardware_at_batch(hw, tokens), settings, tokens, 1, depth).prefill_s
    at_peak = at_batch = 0.0
    for n, start in parts:
        peak = _predict_flat(facts, layout, hw, settings, n, 1, start).prefill_s
        slow = _predict_flat(facts, layout, hardware_at_batch(hw, n), settings, n, 1, start).prefill_s
        if peak is None or slow is None:
            return None
        at_peak, at_batch = at_peak + peak, at_batch + slow
    return whole_s * at_batch / at_peak if at_peak > 0 else whole_s


def predict_here(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, settings: Settings, prompt_tokens: int,
                 output_tokens: int = 1,
                 reused_tokens: int = 0) -> Prediction:
    """A turn of ``prompt_tokens`` computed after ``reused_tokens`` cached, then
    ``output_tokens`` decoded (decode priced in the middle of the reply)."""
    p = _predict_flat(facts, layout, hw, settings, prompt_tokens, output_tokens, reused_tokens)
    if getattr(getattr(hw, "cpu", None), "batch_tflops", None) is None or p.prefill_s is None:
        return p
    pre = _prefill_at_batches(facts, layout, hw, settings, prompt_tokens, reused_tokens, p.prefill_s)
    if pre is None:
        return p
    rate = p.decode_tok_s
    return replace(p, prefill_s=pre, ttft_s=pre, prefill_tok_s=prompt_tokens / pre if pre else None,
                   response_s=pre + output_tokens / rate if rate else None)


def ceilings_here(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, settings: Settings,
                  depth: int) -> tuple[float | None, float | None]:
    """(bandwidth ceiling, compute ceiling) in tok/s for a token decoded at ``depth``."""
    p = _predict_flat(facts, layout, hw, settings, 1, 1, max(depth - 1, 0))
    return p.decode_ceiling_tok_s, p.compute_ceiling_tok_s


def prefill_seconds_here(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, settings: Settings, tokens: int,
                         depth: int, *,
                         at_peak: bool = False) -> float | None:
    """Seconds to compute ``tokens`` prompt tokens after ``depth`` cached, at the roofline:
    each micro-batch at the FLOPS of its size (``at_peak``: every FLOP at the peak)."""
    if at_peak:
        return _predict_flat(facts, layout, hw, settings, tokens, 1, depth).prefill_s
    return predict_here(facts, layout, hw, settings, tokens, 1, depth).prefill_s
