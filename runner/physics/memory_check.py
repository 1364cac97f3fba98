"""The pre-flight memory check the UI runs before loading a model (and ``kvtop
estimate`` prints): on each device, its weights + KV cache + compute buffers against
the memory free there.

The compute buffer is llama.cpp's, from the model's shape (runner.physics.compute_buffer:
the logits of a whole micro-batch, 514 MiB for Gemma-3 270M at -ub 512), no longer a
fixed guess (it was 128 MiB for every model). With layers offloaded, each GPU is checked
against its own free memory and the CPU against system memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.kv_bytes import KVLayout
from kvtop.runner.physics.offload import OffloadSettings, Plan, plan
from kvtop.runner.system.hardware import HardwareProfile
from kvtop.runner.units import GIB


@dataclass(frozen=True)
class MemoryCheck:
    """The tightest device's figures (``where``: "RAM" or "VRAM"), whether every
    device fits (None: some free memory or size is unknown), and a line per device."""

    needed: int | None
    available: int | None
    where: str
    fits: bool | None
    message: str


@dataclass(frozen=True)
class _Need:
    name: str
    where: str
    weights: int
    kv: int
    compute: int | None
    free: int | None

    @property
    def needed(self) -> int:
        return self.weights + self.kv + (self.compute or 0)

    @property
    def fits(self) -> bool | None:
        return None if self.free is None else self.needed <= self.free

    def line(self, named: bool) -> str:
        compute = f"{self.compute / GIB:.2f}" if self.compute is not None else "unknown"
        text = (f"needs about {self.needed / GIB:.2f} GiB (weights {self.weights / GIB:.2f} + "
                f"KV {self.kv / GIB:.2f} + compute {compute})")
        text += f" with {self.free / GIB:.2f} GiB {self.where} free" if self.free is not None \
            else f"; free {self.where} unknown"
        return f"{self.name}: {text}" if named else text


def _needs(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, p: Plan) -> list[_Need]:
    if p.shares is None or not p.held:  # no per-layer split: everything where the single figures say
        where = "VRAM" if p.placement.offloaded and hw.gpus else "RAM"
        compute = p.compute.total if p.compute else None
        return [_Need("all", where, facts.weights_bytes or 0, layout.bytes_allocated, compute, hw.memory_free)]
    return [_Need(s.device.name, "VRAM" if s.device.kind == "gpu" else "RAM", s.weights_bytes, s.kv_bytes,
                  s.compute_bytes, s.device.memory_free) for s in p.held]


def memory_check(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, n_gpu_layers: int,
                 offload: OffloadSettings | None = None) -> MemoryCheck:
    """``offload``: the settings that place layers and size the compute buffer (default:
    llama.cpp's, with ``n_gpu_layers``)."""
    if offload is None:
        offload = OffloadSettings(n_gpu_layers=n_gpu_layers)
    p = plan(facts, layout, hw, offload, depth=0)
    if facts.weights_bytes is None:
        where = "VRAM" if p.placement.offloaded and hw.gpus else "RAM"
        return MemoryCheck(None, hw.memory_free, where, None, "weight bytes unknown")
    needs = _needs(facts, layout, hw, p)
    known = [n for n in needs if n.free is not None]
    tight = min(known, key=lambda n: (n.free or 0) - n.needed) if known else needs[0]  # free: known
    fits = False if any(n.fits is False for n in needs) else (True if len(known) == len(needs) else None)
    message = "; ".join(n.line(len(needs) > 1) for n in needs)
    return MemoryCheck(tight.needed, tight.free, tight.where, fits, message)
