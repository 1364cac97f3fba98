"""One memory sample: engine and UI RSS, system RAM and swap, GPUs (NVML).

A system probe, taken once every ``runner.pacing.MEMORY_SAMPLE_S`` by the app; no
NVML is a value (``gpu_note`` says why), never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.runner.system.hardware import GPUInfo, SystemMemory


@dataclass(frozen=True)
class MemorySample:
    engine_rss: int | None
    ui_rss: int | None  # None when the UI is the engine's process
    system: SystemMemory
    gpus: tuple[GPUInfo, ...] = ()
    gpu_note: str | None = None


def take_sample(engine_pid: int | None, ui_pid: int, same_process: bool = False) -> MemorySample:
    from kvtop.runner.system.hardware import process_memory, query_gpus, system_memory

    eng = process_memory(engine_pid).rss if engine_pid else None
    ui = process_memory(ui_pid).rss
    g = query_gpus(engine_pid)
    return MemorySample(eng, None if same_process else ui, system_memory(), g.gpus, g.note)
