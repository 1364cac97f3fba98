"""The buffer sizes llama.cpp reports while loading (weights, KV, compute, output), read
from its log: plain frozen data, carried by ``Loaded`` (runner/events.py) across the
process pipe, written into traces and shown by the memory pane.

The log itself is captured by runner/engine/llama_log.py (llama.cpp's callback); this
module only reads text, so the events and the records need no part of the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_RE_MODEL_BUF = re.compile(r"load_tensors:\s+(\S+?)(_Mapped)? model buffer size =\s+([\d.]+) MiB")
_RE_KV_SIZE = re.compile(
    r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,.*?K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB"
)
_RE_KV_ISWA = re.compile(r"llama_kv_cache_iswa: creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
_RE_COMPUTE = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_RE_OUTPUT = re.compile(r"llama_context:\s+(\S+)\s+output buffer size =\s+([\d.]+) MiB")
_RE_RS = re.compile(r"llama_memory_recurrent: size =\s+([\d.]+) MiB")


@dataclass(frozen=True)
class KVBufferLine:
    """One ``llama_kv_cache: size = ...`` line: a cache llama.cpp allocated."""

    kind: str  # "full" or "sliding" (from the iswa line before it), else "full"
    mib: float
    cells: int
    layers: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float


@dataclass(frozen=True)
class LlamaBuffers:
    """Buffer sizes llama.cpp reported while loading, in MiB, by device."""

    model_mib: dict[str, float] = field(default_factory=dict)
    kv: tuple[KVBufferLine, ...] = ()
    recurrent_mib: float = 0.0
    compute_mib: dict[str, float] = field(default_factory=dict)
    output_mib: dict[str, float] = field(default_factory=dict)
    weights_mapped: bool | None = None  # weights memory-mapped from the file (not read into RAM)

    @property
    def weights_mib(self) -> float:
        return sum(self.model_mib.values())

    @property
    def kv_mib(self) -> float:
        return sum(k.mib for k in self.kv) + self.recurrent_mib

    @property
    def compute_total_mib(self) -> float:
        return sum(self.compute_mib.values()) + sum(self.output_mib.values())


def parse_buffers(text: str) -> LlamaBuffers:
    model: dict[str, float] = {}
    compute: dict[str, float] = {}
    output: dict[str, float] = {}
    kv: list[KVBufferLine] = []
    rs = 0.0
    mapped: bool | None = None
    pending_kind = "full"
    for line in text.splitlines():
        if m := _RE_MODEL_BUF.search(line):
            model[m.group(1)] = model.get(m.group(1), 0.0) + float(m.group(3))
            mapped = bool(m.group(2)) or bool(mapped)
        elif m := _RE_KV_ISWA.search(line):
            pending_kind = "sliding" if m.group(1) == "SWA" else "full"
        elif m := _RE_KV_SIZE.search(line):
            kv.append(KVBufferLine(pending_kind, float(m.group(1)), int(m.group(2)), int(m.group(3)),
                                   m.group(4), float(m.group(5)), m.group(6), float(m.group(7))))
            pending_kind = "full"
        elif m := _RE_COMPUTE.search(line):
            compute[m.group(1)] = float(m.group(2))
        elif m := _RE_OUTPUT.search(line):
            output[m.group(1)] = float(m.group(2))
        elif m := _RE_RS.search(line):
            rs += float(m.group(1))
    return LlamaBuffers(model, tuple(kv), rs, compute, output, mapped)
