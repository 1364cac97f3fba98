"""Capture llama.cpp's log through our own ``llama_log_set`` callback, and read it.

llama-cpp-python's ``verbose=False`` silences llama.cpp by ``dup2``-ing the whole
process's stdout/stderr, which would blank a running terminal UI. kvtop installs
its own callback instead: every log line is kept in memory (bounded), errors are
kept for the one-line failure reason; the buffer sizes llama.cpp reports
(weights, KV, compute) are parsed from it by runner/llama_buffers.py.

The ctypes callback object is kept referenced at module level for the life of the
process: a garbage-collected callback would crash the next log call.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

MiB = 1024 * 1024


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
        self._cb: object = None  # the ctypes callback, once installed
        self.listeners: list[Callable[[int, str], object]] = []

    def install(self) -> None:
        import llama_cpp

        if self._cb is not None:
            return

        def _callback(level: int, text: bytes | None, _user: object) -> None:  # pragma: no cover - called from C
            try:
                self._feed(int(level), text.decode("utf-8", errors="replace") if text else "")
            except Exception:
                pass

        self._cb = llama_cpp.llama_log_callback(_callback)  # keep referenced: a collected callback crashes llama.cpp
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
