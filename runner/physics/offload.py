"""From llama.cpp's offload settings and a hardware profile to each device's share.

``plan`` is the one place that puts them together for ``kvtop estimate``, the memory
check and the estimate rows: the devices (the CPU, then each GPU, with the figures
given on the command line in place of the measured ones), where llama.cpp puts each
layer (runner.physics.placement), the compute buffer (runner.physics.compute_buffer)
and what each device holds and reads per token (runner.physics.device_split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.compute_buffer import ComputeBuffer, compute_buffer
from kvtop.runner.physics.device_split import DeviceShare, device_shares
from kvtop.runner.physics.kv_bytes import KVLayout
from kvtop.runner.physics.placement import Device, Placement, place_layers

if TYPE_CHECKING:
    from kvtop.runner.settings import Settings
    from kvtop.runner.system.hardware import HardwareProfile

SPLIT_MODES = ("none", "layer")  # -sm row (every matrix split across GPUs) is not modelled


@dataclass(frozen=True)
class OffloadSettings:
    """The llama.cpp flags that decide where layers and buffers go."""

    n_gpu_layers: int = 0
    tensor_split: tuple[float, ...] = ()
    split_mode: str = "layer"
    main_gpu: int = 0
    kv_offload: bool = True
    n_ubatch: int = 512
    n_batch: int = 512
    flash_attn: str = "auto"

    @classmethod
    def from_settings(cls, s: Settings) -> OffloadSettings:
        """From the engine's ``runner.settings.Settings`` (one GPU split: llama.cpp's defaults)."""
        return cls(n_gpu_layers=s.n_gpu_layers, n_ubatch=min(s.n_ubatch, s.n_batch), n_batch=s.n_batch,
                   flash_attn=s.flash_attn)


def devices_from_hardware(hw: HardwareProfile, n_given_gpus: int = 1) -> list[Device]:
    """The CPU, then each GPU found; with none found but GPU figures given,
    ``n_given_gpus`` GPUs with those figures (memory unknown)."""
    gpus = tuple(hw.gpus)
    cpu_bw, cpu_tf = hw.cpu_bandwidth_gbs, hw.cpu_tflops
    cpu_free, cpu_src = hw.cpu_memory_free, hw.cpu_source
    if cpu_src is None:  # a profile recorded before the CPU's own figures were kept
        if hw.cpu is not None:
            cpu_bw, cpu_tf, cpu_src = hw.cpu.bandwidth_gbs, hw.cpu.tflops, "CPU probe"
        elif not gpus:
            cpu_bw, cpu_tf, cpu_src = hw.bandwidth_gbs, hw.tflops, hw.source
        cpu_free = hw.memory_free if not gpus else None
    out = [Device("CPU", "cpu", cpu_bw, cpu_tf, cpu_free, cpu_src or "unknown")]
    given_bw, given_tf = hw.gpu_bandwidth_gbs, hw.gpu_tflops
    for g in gpus:
        out.append(Device(f"GPU {g.index} ({g.name})", "gpu",
                          given_bw if given_bw is not None else g.bandwidth_gbs,
                          given_tf if given_tf is not None else g.tflops, g.memory_free,
                          "given" if hw.gpu_given else (g.tflops_source or "NVML")))
    if not gpus and hw.gpu_given:
        out += [Device(f"GPU {i} (given)", "gpu", given_bw, given_tf, None, "given") for i in range(n_given_gpus)]
    return out


@dataclass(frozen=True)
class Plan:
    """Where everything goes, and what each device holds and costs per token."""

    devices: tuple[Device, ...]
    placement: Placement
    compute: ComputeBuffer | None
    shares: tuple[DeviceShare, ...] | None  # None: the facts do not split the weights by layer
    note: str | None  # e.g. why -ngl did nothing

    @property
    def held(self) -> tuple[DeviceShare, ...]:
        """The devices that hold any weights or cache."""
        return tuple(s for s in self.shares or () if s.holds_bytes)

    @property
    def reading(self) -> tuple[DeviceShare, ...]:
        """The devices a decode token reads from (an untied embedding table on the CPU
        is held but not read)."""
        return tuple(s for s in self.shares or () if s.read_bytes)


def _no_offload_note(o: OffloadSettings, hw: HardwareProfile, n_gpus: int) -> str | None:
    if o.n_gpu_layers == 0 or n_gpus:
        return None
    why = hw.gpu_note or "no GPU found"
    return (f"-ngl {o.n_gpu_layers} did nothing: {why}; every layer runs on the CPU "
            "(give --gpu-bandwidth-gbs/--gpu-tflops to estimate a GPU)")


def plan(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, o: OffloadSettings, *,
         depth: int, prompt_tokens: int = 0, reused_tokens: int = 0) -> Plan:
    """The devices, the placement, the compute buffer and each device's share."""
    devices = devices_from_hardware(hw, max(1, len(o.tensor_split)))
    n_gpus = len(devices) - 1
    n_layer = facts.n_layers or 0
    placement = place_layers(n_layer, o.n_gpu_layers, n_gpus, tensor_split=list(o.tensor_split),
                             gpu_free=[d.memory_free for d in devices[1:]], split_mode=o.split_mode,
                             main_gpu=o.main_gpu, kv_offload=o.kv_offload)
    cb = compute_buffer(facts, layout, o.n_ubatch, o.n_batch, o.flash_attn)
    shares = device_shares(facts, layout, placement, devices, depth=depth, prompt_tokens=prompt_tokens,
                           reused_tokens=reused_tokens, compute=cb)
    return Plan(tuple(devices), placement, cb, tuple(shares) if shares is not None else None,
                _no_offload_note(o, hw, n_gpus))
