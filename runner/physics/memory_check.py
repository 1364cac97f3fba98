"""The pre-flight memory check the UI runs before loading a model (and ``kvtop
estimate`` prints): weights + KV cache + a compute-buffer floor against free memory."""

from __future__ import annotations

from dataclasses import dataclass

from runner.model.facts import ModelFacts
from runner.physics.kv_bytes import KVLayout
from runner.system.hardware import HardwareProfile
from runner.units import GIB, MIB

# llama.cpp's compute buffer is not in the file; this is a floor for the warning only.
COMPUTE_BUFFER_GUESS = 128 * MIB


@dataclass(frozen=True)
class MemoryCheck:
    needed: int | None
    available: int | None
    where: str
    fits: bool | None
    message: str


def memory_check(facts: ModelFacts, layout: KVLayout, hw: HardwareProfile, n_gpu_layers: int) -> MemoryCheck:
    where = "VRAM" if n_gpu_layers != 0 and hw.gpus else "RAM"
    if facts.weights_bytes is None:
        return MemoryCheck(None, hw.memory_free, where, None, "weight bytes unknown")
    needed = facts.weights_bytes + layout.bytes_allocated + COMPUTE_BUFFER_GUESS
    avail = hw.memory_free
    if avail is None:
        return MemoryCheck(needed, None, where, None, f"free {where} unknown")
    fits = needed <= avail
    msg = (f"needs about {needed / GIB:.2f} GiB (weights {facts.weights_bytes / GIB:.2f} + "
           f"KV {layout.bytes_allocated / GIB:.2f} + compute ~{COMPUTE_BUFFER_GUESS / GIB:.2f}) "
           f"with {avail / GIB:.2f} GiB {where} free")
    return MemoryCheck(needed, avail, where, fits, msg)
