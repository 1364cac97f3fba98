"""Capture llama.cpp's log through our own ``llama_log_set`` callback, and read it.

llama-cpp-python's ``verbose=False`` silences llama.cpp by ``dup2``-ing the whole
process's stdout/stderr, which would blank a running terminal UI. kvtop installs
its own callback instead: every log line is kept in memory (bounded), errors are
kept for the one-line failure reason, and the buffer sizes llama.cpp reports
(weights, KV, compute) are parsed from it.

The ctypes callback object is kept referenced at module level for the life of the
process: a garbage-collected callback would crash the next log call.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from dataclasses import dataclass, field

MiB = 1024 * 1024

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


class LogCapture:
    """Process-wide sink for llama.cpp log lines (thread-safe, bounded)."""

    GGML_LOG_LEVEL_ERROR = 4
    GGML_LOG_LEVEL_CONT = 5

    def __init__(self, max_lines: int = 20000):
        self._lock = threading.Lock()
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._errors: deque[str] = deque(maxlen=50)
        self._partial = ""
        self._last_level = 0
        self._mark = 0
        self._count = 0
        self._cb = None
        self.listeners: list = []

    def install(self) -> None:
        import llama_cpp

        if self._cb is not None:
            return

        @llama_cpp.llama_log_callback
        def _callback(level, text, _user):  # pragma: no cover - called from C
            try:
                self._feed(int(level), text.decode("utf-8", errors="replace") if text else "")
            except Exception:
                pass

        self._cb = _callback  # keep referenced: a collected callback crashes llama.cpp
        llama_cpp.llama_log_set(self._cb, None)

    def _feed(self, level: int, text: str) -> None:
        if level == self.GGML_LOG_LEVEL_CONT:
            level = self._last_level
        self._last_level = level
        with self._lock:
            data = self._partial + text
            *complete, self._partial = data.split("\n")
            for line in complete:
                self._lines.append(line)
                self._count += 1
                if level == self.GGML_LOG_LEVEL_ERROR or "error" in line.lower() or "failed" in line.lower():
                    self._errors.append(line.strip())
        for fn in list(self.listeners):
            fn(level, text)

    def mark(self) -> int:
        """Remember where we are so ``since`` returns only later lines."""
        with self._lock:
            self._mark = self._count
            self._errors.clear()
            return self._count

    def since(self, mark: int) -> str:
        with self._lock:
            n_new = self._count - mark
            lines = list(self._lines)[-n_new:] if n_new > 0 else []
            return "\n".join(lines + ([self._partial] if self._partial else []))

    def last_error(self) -> str | None:
        """The most telling error since ``mark``: llama.cpp logs the cause first
        ("error loading model: ...") and generic follow-ups ("failed to load model") after."""
        with self._lock:
            errors = [line for line in self._errors if line]
        for line in errors:
            if "error loading model" in line:
                return line.split("error loading model:", 1)[-1].strip() or line
        return errors[0] if errors else None


CAPTURE = LogCapture()
