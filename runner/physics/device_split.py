"""Bytes, FLOPs and time per device when llama.cpp splits a model (``-ngl``, ``-ts``).

Decode runs the layers one after another, each on the device that holds it, so a token
takes the sum over devices of (bytes read on that device / that device's bandwidth):

    seconds per token = sum_d read_d / bandwidth_d

and the device that contributes most of that time is the one that binds. An 8B Q4
model with 20 of its 32 layers on a 1 TB/s GPU still reads 12 layers from 60 GB/s
system memory per token: those dominate (runner/physics/test_device_split.py works it
out by hand). Prefill and the compute ceiling add up FLOPs / FLOPS the same way.

What each device holds (placement: runner.physics.placement):

* weights: its repeating layers (every expert of an MoE), and on the output layer's
  device the output matrix and the small non-repeating tensors; the input embedding
  always on the CPU (a tied model with its output layer on a GPU keeps both: the table
  on the CPU, a copy of it as the output matrix on the GPU);
* KV: its layers' caches (all in system memory with ``--no-kv-offload``);
* compute: the graph's output moment on the output layer's device, a layer's largest
  moment on each device that runs layers (runner.physics.compute_buffer), and on the
  CPU the logits llama.cpp hands back and the input embeddings. On one device this is
  exactly the measured buffer; split across devices it is the same graph model, not
  measured here (no GPU).

Not modelled: llama.cpp's op offload (a GPU build computes a large prompt batch's
CPU-resident matrices on the GPU, copying the weights over PCIe), and ``-sm row``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.compute_buffer import F32, ComputeBuffer
from kvtop.runner.physics.kv_bytes import KVLayout, layer_kv
from kvtop.runner.physics.phase_costs import has_split, layer_attention_flops, logit_tokens, output_flops
from kvtop.runner.physics.placement import CPU, Device, Placement


@dataclass(frozen=True)
class DeviceShare:
    """One device's part of the model: what it holds and what a token costs it."""

    device: Device
    layers: int  # repeating layers it runs
    output_layer: bool
    weights_bytes: int  # resident
    kv_bytes: int  # allocated at n_ctx
    compute_bytes: int | None  # its compute buffers (None: shape unknown)
    read_bytes: int  # read per decode token at the depth asked for (weights + KV)
    decode_flops: float  # per decode token
    prefill_flops: float  # for the prompt asked for

    @property
    def seconds_per_token(self) -> float | None:
        """Decode time this device adds to each token (None: its bandwidth is unknown)."""
        if not self.read_bytes:
            return 0.0
        bw = self.device.bandwidth_gbs
        return self.read_bytes / (bw * 1e9) if bw else None

    @property
    def holds_bytes(self) -> bool:
        return self.weights_bytes + self.kv_bytes > 0


@dataclass
class _Acc:
    layers: int = 0
    output_layer: bool = False
    weights: int = 0
    kv: int = 0
    read: int = 0
    decode_flops: float = 0.0
    prefill_flops: float = 0.0


def _compute_on(d: int, acc: _Acc, cb: ComputeBuffer | None, all_on_cpu: bool, embd_input: int) -> int | None:
    if cb is None:
        return None
    if all_on_cpu:
        return cb.total if d == CPU else 0
    graph = max(cb.output_phase if acc.output_layer else 0, cb.layer_phase if acc.layers else 0)
    if d == CPU:
        return max(graph, embd_input) + cb.output_buffer
    return graph


def device_shares(facts: ModelFacts, layout: KVLayout, placement: Placement, devices: list[Device], *,
                  depth: int, prompt_tokens: int = 0, reused_tokens: int = 0,
                  compute: ComputeBuffer | None = None) -> list[DeviceShare] | None:
    """Each device's share, in device order; None when the facts do not split the
    weights by layer (a file with unknown tensor types, facts from an older trace)."""
    if not has_split(facts) or len(placement.layers) != facts.n_layers:
        return None
    acc = [_Acc() for _ in devices]
    kv = layer_kv(facts, layout)
    attn = layer_attention_flops(facts, prompt_tokens, reused_tokens)
    for il, d in enumerate(placement.layers):
        a = acc[d]
        a.layers += 1
        a.weights += facts.layer_bytes[il]
        a.read += facts.layer_bytes_active[il]
        a.decode_flops += 2.0 * facts.layer_params_active[il]
        a.prefill_flops += 2.0 * facts.layer_params_active[il] * prompt_tokens + attn[il]
        k = acc[placement.kv_device(il)]
        k.kv += kv[il].allocated
        k.read += kv[il].read_at(depth)
    out = acc[placement.output]
    out.output_layer = True
    extra = (facts.output_bytes or 0) + (facts.other_bytes or 0)
    out.weights += extra
    out.read += extra
    out.decode_flops += output_flops(facts, 1)
    out.prefill_flops += output_flops(facts, logit_tokens(prompt_tokens))
    if not (facts.output_tied and placement.output == CPU):  # a tied table on the CPU serves both
        acc[CPU].weights += facts.embd_bytes or 0
    all_on_cpu = all(d == CPU for d in placement.layers) and placement.output == CPU
    embd_input = F32 * compute.n_tokens * (facts.n_embd or 0) if compute else 0
    return [DeviceShare(dev, a.layers, a.output_layer, a.weights, a.kv,
                        _compute_on(d, a, compute, all_on_cpu, embd_input), a.read, a.decode_flops, a.prefill_flops)
            for d, (dev, a) in enumerate(zip(devices, acc))]


def _sum_time(parts: list[tuple[float, float | None]]) -> float | None:
    """sum(amount / rate); None when some amount has no rate."""
    total = 0.0
    for amount, rate in parts:
        if not amount:
            continue
        if not rate:
            return None
        total += amount / rate
    return total


def decode_seconds(shares: list[DeviceShare]) -> float | None:
    """Seconds per decode token, bandwidth-bound: sum over devices of read / bandwidth."""
    return _sum_time([(s.read_bytes, s.device.bandwidth_gbs and s.device.bandwidth_gbs * 1e9) for s in shares])


def decode_compute_seconds(shares: list[DeviceShare]) -> float | None:
    return _sum_time([(s.decode_flops, s.device.tflops and s.device.tflops * 1e12) for s in shares])


def prefill_seconds_on(shares: list[DeviceShare]) -> float | None:
    return _sum_time([(s.prefill_flops, s.device.tflops and s.device.tflops * 1e12) for s in shares])


def slowest(shares: list[DeviceShare]) -> DeviceShare | None:
    """The device that adds most to each decode token's time (None: a time is unknown)."""
    times = [(s.seconds_per_token, s) for s in shares if s.read_bytes]
    known = [(t, s) for t, s in times if t is not None]
    if not times or len(known) < len(times):
        return None
    return max(known, key=lambda ts: ts[0])[1]

